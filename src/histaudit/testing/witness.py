"""A real C2SP tlog-witness for tests: litewitness (filippo.io/torchwood), started here.

:class:`Witness` gives each witness its own ssh-agent holding a fresh Ed25519 key (that is
where litewitness keeps its signing key), its own SQLite state directory and a free
loopback port; :meth:`Witness.add_log` registers a ledger's origin and checkpoint key with
witnessctl, as an operator would. A test starts and stops it (tests/support/witness.py
has the pytest fixture); the binaries come from ``scripts/install-witness.sh`` (``make
test`` runs it), found in ``.tools/bin`` or through ``$HISTAUDIT_WITNESS_BIN_DIR``.
:func:`write_policy` writes a C2SP tlog-policy file naming the witnesses started.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .engine import _repo_root, end_process, free_port

__all__ = ["Witness", "WitnessError", "witness_bin_dir", "write_policy"]

_READY_TIMEOUT = 20.0


class WitnessError(RuntimeError):
    """The witness, its ssh-agent or witnessctl could not be started or used."""


def witness_bin_dir() -> Path:
    """Where litewitness and witnessctl are; a WitnessError says how to build them."""
    where = Path(os.environ.get("HISTAUDIT_WITNESS_BIN_DIR") or _repo_root() / ".tools" / "bin")
    missing = [n for n in ("litewitness", "witnessctl") if not (where / n).is_file()]
    if missing:
        raise WitnessError(f"{', '.join(missing)} not in {where}: run "
                           f"scripts/install-witness.sh (make test does)")
    return where


def _run(argv: list[str], **kw: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise WitnessError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()[-500:]}")
    return str(done.stdout) + str(done.stderr)


class Witness:
    """One litewitness with its own ssh-agent, key, database and port."""

    def __init__(self, state_dir: Path, *, name: str = "witness.test/w1") -> None:
        self.name = name
        self.state_dir = state_dir
        self.db = state_dir / "litewitness.db"
        self.port = 0
        self.vkey = ""
        self._bins = witness_bin_dir()
        # A unix socket path is limited to ~108 bytes; pytest's tmp paths can be longer.
        self._sock_dir = Path(tempfile.mkdtemp(prefix="hw-", dir="/tmp"))
        self.sock = self._sock_dir / "agent.sock"
        self._agent: subprocess.Popen[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = state_dir / "litewitness.log"

    @property
    def url(self) -> str:
        """The base URL: ``POST {url}add-checkpoint`` (C2SP tlog-witness)."""
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> Witness:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        key = self.state_dir / "witness_ed25519"
        if not key.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name,
                  "-f", str(key)])
        self.sock.unlink(missing_ok=True)
        self._agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(self.sock)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def agent_listening() -> bool:
            # The socket file appears at bind(), before listen(): a connect that is
            # refused meanwhile is what ssh-add failed on under load.
            if self._agent is not None and self._agent.poll() is not None:
                raise WitnessError(f"ssh-agent exited with {self._agent.returncode}")
            with socket.socket(socket.AF_UNIX) as s:
                return s.connect_ex(str(self.sock)) == 0

        self._wait(agent_listening, "ssh-agent listening")
        _run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(self.sock)})
        fingerprint = _run(["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"]).split()[1]
        self.port = self.port or free_port()  # a restart keeps its URL
        self._proc = subprocess.Popen(
            [str(self._bins / "litewitness"), "-name", self.name, "-db", str(self.db),
             "-ssh-agent", str(self.sock), "-key", fingerprint,
             "-listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=self._log.open("ab"))

        def ready() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        self._wait(ready, "litewitness listening")
        found = re.search(r"vkey=(\S+)", self._log.read_text(errors="replace"))
        if found is None:
            raise WitnessError(f"litewitness printed no verifier key: {self.log_tail()}")
        self.vkey = found.group(1)
        return self

    def _wait(self, predicate: object, what: str) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise WitnessError(f"litewitness exited: {self.log_tail()}")
            if predicate():  # type: ignore[operator]
                return
            time.sleep(0.02)
        raise WitnessError(f"timed out waiting for {what}: {self.log_tail()}")

    def log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-1500:] if self._log.exists() else ""

    def ctl(self, *args: str) -> str:
        return _run([str(self._bins / "witnessctl"), args[0], "-db", str(self.db), *args[1:]])

    def add_log(self, origin: str, log_vkey: str) -> None:
        """Register a log (a ledger's origin) and its checkpoint verifier key."""
        self.ctl("add-log", "-origin", origin)
        self.ctl("add-key", "-origin", origin, "-key", log_vkey)

    def known_size(self, origin: str) -> int:
        """The tree size the witness has last cosigned for ``origin`` (witnessctl)."""
        for line in self.ctl("list-logs").splitlines():
            if f'"origin":"{origin}"' in line:
                found = re.search(r'"size":(\d+)', line)
                return int(found.group(1)) if found else -1
        raise WitnessError(f"witness does not know {origin}")

    def stop(self) -> None:
        """Stop the witness (its state stays: :meth:`start` again resumes it)."""
        end_process(self._proc, sig=signal.SIGINT, grace=5)
        self._proc = None
        end_process(self._agent, grace=5)
        self._agent = None
        self.sock.unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._sock_dir, ignore_errors=True)

    def __enter__(self) -> Witness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_policy(path: Path, witnesses: list[Witness], *, quorum: int | str,
                 log_vkey: str | None = None, urls: bool = True) -> Path:
    """A C2SP tlog-policy file naming ``witnesses`` (with their URLs) and a quorum of
    ``quorum`` of them (a number, ``any`` or ``all``)."""
    lines = [f"log {log_vkey}"] if log_vkey else []
    names = []
    for i, w in enumerate(witnesses, 1):
        names.append(f"w{i}")
        lines.append(f"witness w{i} {w.vkey}" + (f" {w.url}" if urls else ""))
    lines.append(f"group witnesses {quorum} {' '.join(names)}")
    lines.append("quorum witnesses")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
