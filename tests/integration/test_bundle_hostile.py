"""``verify --bundle`` on what an attacker hands an auditor (docs/bundle.md §9 step 5).

1. Hostile *files*: a FIFO (used to hang forever), a symlink to /dev/zero (used to read
   until memory ran out), a device node, a socket, a directory, an oversized or sparse
   file, a symlink out of the bundle — each is refused before a byte is read: exit 2, one
   line, within a timeout. A symlink that stays inside the bundle is fine.
2. Families of hostile *contents*, property-style (hypothesis, bounded): for every bundle
   file, truncations at random offsets, random byte flips, duplicated and missing lines,
   every field of every JSON document replaced by a value of each wrong type, and a
   manifest re-signed by a trusted key with any field of any type. Each must give a finding
   (``verify_bundle`` returns a result that is not ok, or raises :class:`SignatureError`
   for a signed document whose signature no longer holds: exit 1) or an input error
   (:class:`InputError`: exit 2, one line) — never another exception (a traceback), never
   a clean verdict on changed bytes, never a hang.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.bundle.envelope import FILE_MAX_BYTES
from histaudit.bundle.verify import verify_bundle
from histaudit.errors import InputError, SignatureError
from support.bundles import Built, build_bundle, manifest_of, resign_manifest
from support.cli import cli, exits, one_error_line

# one xdist worker builds the module fixtures (built, originals, scratch) once (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("bundle_hostile")

FILES = ("manifest.dsse.json", "checkpoint.note", "entries.jsonl", "heads.jsonl",
         "keys.json", "payloads.jsonl")
LISTED = FILES[1:]
HANG_TIMEOUT = 30  # seconds; a FIFO used to block forever


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_bundle(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def copy(built: Built, tmp_path: Path) -> Path:
    dest = tmp_path / "bundle"
    shutil.copytree(built.bundle, dest)
    return dest


def _verify_cli(bundle: Path, built: Built, cwd: Path) -> Any:
    return cli("verify", "--bundle", bundle, "--trust", built.pub, cwd=cwd,
               timeout=HANG_TIMEOUT)


def test_the_bundle_is_clean(built: Built, tmp_path: Path) -> None:
    assert verify_bundle(built.bundle, built.trust).ok
    exits(_verify_cli(built.bundle, built, tmp_path), 0)


# --- 1. hostile files ---------------------------------------------------------------------

def _fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)


def _dev_zero_link(path: Path, outside: Path) -> None:
    path.symlink_to("/dev/zero")


def _dev_zero_node(path: Path, outside: Path) -> None:
    """A character device node (1, 5 = /dev/zero) inside the bundle: no symlink at all."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.fail("mknod needs root (CAP_MKNOD); CI runs as root", pytrace=False)


def _socket(path: Path, outside: Path) -> None:
    short = Path(tempfile.mkdtemp(dir="/tmp"))  # AF_UNIX paths are at most 107 bytes
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(short / "s"))
    s.close()  # the socket file stays; rename moves it into the bundle
    (short / "s").rename(path)
    short.rmdir()


def _directory(path: Path, outside: Path) -> None:
    path.mkdir()


def _sparse_5gib(path: Path, outside: Path) -> None:
    with open(path, "wb") as fh:
        fh.truncate(5 << 30)


def _link_out(path: Path, outside: Path) -> None:
    """The genuine file, moved out of the bundle and linked back: the bytes would verify."""
    path.symlink_to(outside / path.name)


def _relative_link_out(path: Path, outside: Path) -> None:
    path.symlink_to(os.path.relpath(outside / path.name, path.parent))


#: name -> (turn the file at path into it, what the error must say)
HOSTILE_FILES: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "a FIFO": (_fifo, "is a FIFO, not a regular file"),
    "a symlink to /dev/zero": (_dev_zero_link, "symlink that leaves the bundle"),
    "a /dev/zero device node": (_dev_zero_node, "is a character device"),
    "a socket": (_socket, "is a socket"),
    "a directory": (_directory, "is a directory"),
    "a 5 GiB sparse file": (_sparse_5gib, "larger than"),
    "a symlink out of the bundle": (_link_out, "symlink that leaves the bundle"),
    "a relative symlink out of the bundle": (_relative_link_out,
                                             "symlink that leaves the bundle"),
}


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("case", HOSTILE_FILES)
def test_hostile_file_is_refused_without_reading_it(case: str, name: str, built: Built,
                                                    copy: Path, tmp_path: Path) -> None:
    make, needle = HOSTILE_FILES[case]
    outside = tmp_path / "outside"
    outside.mkdir()
    path = copy / name
    path.replace(outside / name)  # the genuine file, outside the bundle
    make(path, outside)
    with pytest.raises(InputError, match=needle):
        verify_bundle(copy, built.trust)
    line = one_error_line(_verify_cli(copy, built, tmp_path), needle)
    assert name in line


def test_symlink_inside_the_bundle_is_followed(built: Built, copy: Path,
                                               tmp_path: Path) -> None:
    (copy / "keys.json").replace(copy / "keys.real")
    (copy / "keys.json").symlink_to("keys.real")
    (copy / "entries.jsonl").replace(copy / "sub")
    (copy / "entries.jsonl").symlink_to(copy / "sub")  # absolute, but still inside
    assert verify_bundle(copy, built.trust).ok
    exits(_verify_cli(copy, built, tmp_path), 0)


@pytest.mark.parametrize("name", LISTED)
def test_file_far_larger_than_its_signed_size_is_refused(name: str, built: Built,
                                                         copy: Path, tmp_path: Path) -> None:
    """The bound comes from the signed byte count: twice it plus 1 MiB, here 3 MiB more."""
    listed = manifest_of(copy)["files"][name]["bytes"]
    with open(copy / name, "ab") as fh:
        fh.write(b"\n" * (2 * listed + (3 << 20)))
    with pytest.raises(InputError, match=f"{name} is .* bytes, the signed manifest says "
                                         f"{listed}"):
        verify_bundle(copy, built.trust)
    one_error_line(_verify_cli(copy, built, tmp_path), name, "larger than")


def test_a_little_larger_is_still_read_and_reported(built: Built, copy: Path) -> None:
    """Within the bound, a grown file is verified anyway, so the finding says what changed."""
    with open(copy / "entries.jsonl", "ab") as fh:
        fh.write((copy / "entries.jsonl").read_bytes().splitlines(keepends=True)[0])
    result = verify_bundle(copy, built.trust)
    assert not result.ok
    assert "bundle-file-changed" in {f.code for f in result.findings}


def test_absolute_cap_applies_without_a_signed_size(built: Built, copy: Path) -> None:
    """A (re-signed) manifest whose byte count is not a number: the absolute cap holds."""
    resign_manifest(copy, built.signer,
                    lambda m: m["files"]["checkpoint.note"].update(bytes="many"))
    with open(copy / "checkpoint.note", "ab") as fh:
        fh.truncate(FILE_MAX_BYTES["checkpoint.note"] + 1)
    with pytest.raises(InputError, match=r"checkpoint\.note is .* bytes: larger than"):
        verify_bundle(copy, built.trust)


@pytest.mark.parametrize("name", ["../keys.json", "sub/x", ".hidden", "", "nul\x00byte"])
def test_unsafe_names_in_a_signed_manifest(name: str, built: Built, copy: Path,
                                           tmp_path: Path) -> None:
    resign_manifest(copy, built.signer,
                    lambda m: m["files"].update({name: m["files"]["keys.json"]}))
    with pytest.raises(InputError, match="unsafe path"):
        verify_bundle(copy, built.trust)
    one_error_line(_verify_cli(copy, built, tmp_path), "unsafe path")


# --- 2. families of hostile contents -------------------------------------------------------

def _outcome(bundle: Path, built: Built) -> str:
    """'finding', 'input error' or 'signature' (a signed document whose signature no
    longer verifies: exit 1); anything else (another exception, a clean verdict on
    changed bytes) fails the test."""
    try:
        result = verify_bundle(bundle, built.trust)
    except InputError:
        return "input error"
    except SignatureError:
        return "signature"
    assert not result.ok, "changed bytes verified clean"
    return "finding"


class Originals(dict[str, bytes]):
    def __repr__(self) -> str:  # keep hypothesis' failure reports short
        return f"<the genuine {', '.join(self)}>"


@pytest.fixture(scope="module")
def originals(built: Built) -> dict[str, bytes]:
    return Originals({name: (built.bundle / name).read_bytes() for name in FILES})


@pytest.fixture(scope="module")
def scratch(built: Built) -> Iterator[Path]:
    """One scratch copy reused by every example: each example rewrites one file and puts it
    back (hypothesis examples cannot use function-scoped tmp_path)."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "bundle"
        shutil.copytree(built.bundle, dest)
        yield dest


def _check(scratch: Path, built: Built, originals: dict[str, bytes], name: str,
           data: bytes) -> str:
    if data == originals[name]:
        return "unchanged"
    (scratch / name).write_bytes(data)
    try:
        return _outcome(scratch, built)
    finally:
        (scratch / name).write_bytes(originals[name])


SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(name=st.sampled_from(FILES), cut=st.floats(0, 1, exclude_max=True))
def test_truncated_anywhere(name: str, cut: float, scratch: Path, built: Built,
                            originals: dict[str, bytes]) -> None:
    data = originals[name]
    _check(scratch, built, originals, name, data[:int(len(data) * cut)])


@SETTINGS
@given(name=st.sampled_from(FILES), flips=st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1,
    max_size=4))
def test_bytes_flipped_anywhere(name: str, flips: list[tuple[float, int]], scratch: Path,
                                built: Built, originals: dict[str, bytes]) -> None:
    data = bytearray(originals[name])
    for where, mask in flips:
        data[int(len(data) * where)] ^= mask
    _check(scratch, built, originals, name, bytes(data))


JSONL = ("entries.jsonl", "heads.jsonl", "payloads.jsonl")


@SETTINGS
@given(name=st.sampled_from(JSONL), data=st.data())
def test_lines_duplicated_dropped_or_moved(name: str, data: st.DataObject, scratch: Path,
                                           built: Built, originals: dict[str, bytes]) -> None:
    lines = originals[name].splitlines(keepends=True)
    op = data.draw(st.sampled_from(["duplicate", "drop", "move", "blank", "crlf"]))
    i = data.draw(st.integers(0, len(lines) - 1))
    if op == "duplicate":
        lines.insert(data.draw(st.integers(0, len(lines))), lines[i])
    elif op == "drop":
        del lines[i]
    elif op == "move":
        line = lines.pop(i)
        lines.insert(data.draw(st.integers(0, len(lines))), line)
    elif op == "blank":
        lines.insert(i, b"\n")
    else:
        lines[i] = lines[i].rstrip(b"\n") + b"\r\n"
    _check(scratch, built, originals, name, b"".join(lines))


WRONG = st.sampled_from([None, True, False, 0, -1, 1, 2**63, -(2**70), 1.5, 1e308, "", "x",
                         "=" * 3, "AAAA", "\x00", [], [1], ["AAAA"], {}, {"a": 1}])


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``doc`` (object members and array elements)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for n, v in enumerate(doc):
            out += _paths(v, (*prefix, n))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


@SETTINGS
@given(name=st.sampled_from(("keys.json", *JSONL)), data=st.data(), value=WRONG)
def test_any_field_of_any_wrong_type(name: str, data: st.DataObject, value: Any,
                                     scratch: Path, built: Built,
                                     originals: dict[str, bytes]) -> None:
    if name == "keys.json":
        docs = [json.loads(originals[name])]
    else:
        docs = [json.loads(line) for line in originals[name].splitlines()]
    n = data.draw(st.integers(0, len(docs) - 1))
    path = data.draw(st.sampled_from(_paths(docs[n])))
    _set(docs[n], path, value)
    out = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
    _check(scratch, built, originals, name, out)


@SETTINGS
@given(data=st.data(), value=WRONG)
def test_resigned_manifest_with_any_field_of_any_wrong_type(
        data: st.DataObject, value: Any, scratch: Path, built: Built,
        originals: dict[str, bytes]) -> None:
    """The exporter is the adversary: the manifest verifies, its content is hostile."""
    manifest = manifest_of(built.bundle)
    path = data.draw(st.sampled_from(_paths(manifest)))
    try:
        resign_manifest(scratch, built.signer, lambda m: _set(m, path, value))
        try:
            verify_bundle(scratch, built.trust)
        except InputError:
            pass
    finally:
        (scratch / "manifest.dsse.json").write_bytes(originals["manifest.dsse.json"])


@SETTINGS
@given(name=st.sampled_from(("entries.jsonl", "heads.jsonl")), data=st.data(),
       member=st.sampled_from(["body", "sig"]))
def test_signed_bytes_inside_base64_flipped(name: str, data: st.DataObject, member: str,
                                            scratch: Path, built: Built,
                                            originals: dict[str, bytes]) -> None:
    """Past the JSON layer: the decoded body or signature changed, re-encoded properly."""
    docs = [json.loads(line) for line in originals[name].splitlines()]
    doc = docs[data.draw(st.integers(0, len(docs) - 1))]
    raw = bytearray(base64.b64decode(doc[member]))
    raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    doc[member] = base64.b64encode(bytes(raw)).decode()
    out = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
    assert _check(scratch, built, originals, name, out) == "finding"


@pytest.mark.parametrize("case", ["truncated entries", "flipped heads", "wrong-typed key",
                                  "duplicated payload line"])
def test_the_command_agrees(case: str, built: Built, copy: Path, tmp_path: Path) -> None:
    """A sample of the families through the real command: exit 1 or one line and exit 2."""
    if case == "truncated entries":
        data = (copy / "entries.jsonl").read_bytes()
        (copy / "entries.jsonl").write_bytes(data[:len(data) // 3])
    elif case == "flipped heads":
        data = bytearray((copy / "heads.jsonl").read_bytes())
        data[len(data) // 2] ^= 0x01
        (copy / "heads.jsonl").write_bytes(bytes(data))
    elif case == "wrong-typed key":
        doc = json.loads((copy / "keys.json").read_bytes())
        doc["keys"][0]["not_before"] = 12
        (copy / "keys.json").write_text(json.dumps(doc))
    else:
        lines = (copy / "payloads.jsonl").read_bytes().splitlines(keepends=True)
        (copy / "payloads.jsonl").write_bytes(b"".join([*lines, lines[0]]))
    r = _verify_cli(copy, built, tmp_path)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    if r.returncode == 2:
        one_error_line(r)
    else:
        exits(r, 1)


@pytest.mark.parametrize("size", ["9" * 5000, str(1 << 63), "18446744073709551616"])
def test_signed_note_with_an_absurd_tree_size(size: str, built: Built, copy: Path,
                                              tmp_path: Path) -> None:
    """A hostile exporter's properly signed note whose size has 5000 digits used to raise
    ValueError (Python's int() digit limit): a traceback."""
    from histaudit.ledger.checkpoint import SIG_PREFIX, note_key_hash

    origin = manifest_of(copy)["origin"]
    text = f"{origin}\n{size}\n{base64.b64encode(bytes(32)).decode()}\n".encode()
    blob = note_key_hash(origin, built.signer.public) + built.signer.sign(text)
    line = f"{SIG_PREFIX}{origin} {base64.b64encode(blob).decode()}\n".encode()
    (copy / "checkpoint.note").write_bytes(text + b"\n" + line)
    with pytest.raises(InputError, match="larger than 2"):
        verify_bundle(copy, built.trust)
    one_error_line(_verify_cli(copy, built, tmp_path), "checkpoint.note", "tree size")
