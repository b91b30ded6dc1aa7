"""Output that goes with a checkpoint, written so that a failure changes nothing.

:class:`StagedOutput` is the :class:`histaudit.ledger.chain.CheckpointOutput` of
``histaudit checkpoint --out FILE`` (one file) and ``histaudit export --out DIR`` (a
directory): the target is checked before the ledger is touched, the bytes are written and
fsynced in a hidden temporary file or directory beside it (same file system, so the move
is one ``rename``), and the move happens inside the transaction that stores the
checkpoint. A missing or unwritable directory, a full disk or a failed commit therefore
leaves no checkpoint row and no partial file (docs/bundle.md §8.8). Only a SIGKILL
between write and move can leave a ``.<name>.partial-*`` entry beside the target.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from histaudit.errors import InputError, UsageError
from histaudit.ledger.checkpoint import Checkpoint

__all__ = ["StagedOutput"]

Build = Callable[[Checkpoint], bytes | Mapping[str, bytes]]


class StagedOutput:
    """Write ``build(cp)`` to ``target``: bytes for a file, {name: bytes} for a directory.

    Constructing it checks the target (its directory exists; a file target is absent or
    a regular file, which is replaced; a directory target is absent or empty) and raises
    :class:`UsageError` before anything is read or written.
    """

    def __init__(self, target: str | os.PathLike[str], build: Build, *, what: str,
                 directory: bool) -> None:
        self.shown = str(target)
        self.what = what
        self.directory = directory
        self._build = build
        # Symlinks are followed once, now: the move then replaces what the link named.
        self.target = Path(os.path.realpath(target))
        self._tmp: Path | None = None
        self._backup: Path | None = None
        self._existed = False
        self._placed = False
        self.written = 0
        self._check()

    # -- checking -----------------------------------------------------------------------

    def _fail(self, problem: str) -> UsageError:
        return UsageError(f"cannot write {self.what} {self.shown}: {problem}")

    def _check(self) -> None:
        parent = self.target.parent
        if not parent.exists():
            raise self._fail(f"directory {parent} does not exist")
        if not parent.is_dir():
            raise self._fail(f"{parent} is not a directory")
        if not self.target.exists():
            return
        self._existed = True
        if self.directory:
            if not self.target.is_dir():
                raise self._fail("it exists and is not a directory")
            if any(self.target.iterdir()):
                raise UsageError(f"{self.shown} exists and is not empty; refusing to "
                                 f"overwrite")
        elif not self.target.is_file():
            raise self._fail("it exists and is not a regular file")

    def _os_error(self, exc: OSError) -> InputError:
        return InputError(f"cannot write {self.what} {self.shown}: "
                          f"{exc.strerror or type(exc).__name__}")

    # -- CheckpointOutput -----------------------------------------------------------------

    def prepare(self, cp: Checkpoint) -> None:
        data = self._build(cp)
        parent = self.target.parent
        prefix = f".{self.target.name}.partial-"
        try:
            # Created with the modes a plain mkdir/open would give (the umask applies).
            tmp = parent / f"{prefix}{secrets.token_hex(6)}"
            if self.directory:
                assert isinstance(data, Mapping)
                tmp.mkdir()
                self._tmp = tmp
                made = {tmp}
                for name, blob in data.items():
                    path = tmp / name
                    if path.parent not in made:  # a file in a subdirectory (scitt/...)
                        path.parent.mkdir(parents=True, exist_ok=True)
                        made.update((tmp / name).parents)
                    _write_synced(path, blob)
                    self.written += len(blob)
                for made_dir in sorted(made, key=lambda p: -len(p.parts)):
                    _fsync_dir(made_dir)
            else:
                assert isinstance(data, bytes)
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                self._tmp = tmp
                _write_synced(tmp, data)
                self.written = len(data)
        except OSError as exc:
            raise self._os_error(exc) from None

    def place(self) -> None:
        assert self._tmp is not None
        try:
            if not self.directory and self._existed:
                # A hard link keeps the old file, so a failed commit can put it back.
                backup = self.target.with_name(f".{self.target.name}.old-"
                                               f"{secrets.token_hex(6)}")
                with contextlib.suppress(OSError):
                    os.link(self.target, backup)
                    self._backup = backup
            # rename(2) replaces an empty directory or a file atomically.
            os.rename(self._tmp, self.target)
            self._tmp = None
            self._placed = True
            _fsync_dir(self.target.parent)
        except OSError as exc:
            raise self._os_error(exc) from None

    def finish(self, stored: bool) -> None:
        with contextlib.suppress(OSError):
            if not stored and self._placed:
                _remove(self.target)
                if self.directory and self._existed:
                    self.target.mkdir()
                elif self._backup is not None:
                    os.rename(self._backup, self.target)
                    self._backup = None
            if self._tmp is not None:
                _remove(self._tmp)
            if self._backup is not None:
                self._backup.unlink()


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
