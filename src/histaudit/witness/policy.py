"""A witness policy (C2SP tlog-policy text) and the verdict it gives on a cosigned note.

The file names witnesses and how many of them must have cosigned, in the line format of
Sigsum and tlog-policy that torchwood's ``ParsePolicy`` reads too::

    log <log vkey>                        # optional; the log key is checked by --trust
    witness <name> <cosignature vkey> [<add-checkpoint base URL>]
    group <name> <N|any|all> <member>...  # members: witnesses or earlier groups
    quorum <witness or group name | none>

``#`` starts a comment. :meth:`WitnessPolicy.judge` reads the cosignature lines of a note
and verifies each one that names a policy witness over the note's exact text (never a
re-serialization); :class:`PolicyVerdict` says whether the quorum holds and turns what
fails into findings (``witness-quorum-missing``, ``cosignature-invalid``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from histaudit.errors import InputError
from histaudit.inputs import read_limited
from histaudit.ledger.checkpoint import (
    WitnessKey,
    note_text,
    read_cosignature,
    signature_lines,
    verify_cosignature,
)
from histaudit.urls import check_url_text, shown_url, shown_word
from histaudit.verify.findings import Finding
from histaudit.verify.report import Report, Scope

__all__ = ["Counted", "Group", "PolicyVerdict", "PolicyWitness", "WitnessPolicy",
           "counted_cosignatures", "read_policy", "witness_findings", "witness_report"]

LEDGER = "ledger"
POLICY_LIMIT = 1 << 20
"""Largest policy file read (bytes); a bigger one is refused, never read in part."""
MAX_DEPTH = 16
"""Deepest nesting of groups in groups; real policies nest two or three levels."""
MAX_EXPANDED = 1024
"""Most witness references a group may stand for once its subgroups are written out.
Groups may share earlier groups, so a few hundred lines could otherwise stand for 2^100
references and make describing or judging the quorum run forever."""
_CONTRADICTIONS = frozenset({"checkpoint-rollback", "checkpoint-inconsistent"})


@dataclass(frozen=True)
class PolicyWitness:
    """A witness the policy names: its policy ``name``, cosignature key, optional URL."""

    name: str
    key: WitnessKey
    url: str | None = None


@dataclass(frozen=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class PolicyVerdict:
    """What a policy says of one note: which witnesses cosigned it (name → UNIX time),
    which named witnesses' cosignatures do not verify, and whether the quorum holds."""

    satisfied: bool
    cosigned: Mapping[str, int]
    invalid: tuple[str, ...]
    required: str

    def findings(self, where: str = "checkpoint") -> tuple[Finding, ...]:
        found = [Finding.make("cosignature-invalid", LEDGER, None,
                              f"{where}: the cosignature of witness {name} does not verify "
                              f"over the note text")
                 for name in self.invalid]
        if not self.satisfied:
            have = ", ".join(sorted(self.cosigned)) or "none"
            found.append(Finding.make(
                "witness-quorum-missing", LEDGER, None,
                f"{where}: the witness policy needs {self.required}; valid cosignatures "
                f"by: {have}"))
        return tuple(found)


@dataclass(frozen=True)
class WitnessPolicy:
    witnesses: Mapping[str, PolicyWitness]
    groups: Mapping[str, Group] = field(default_factory=dict)
    quorum: str | None = None
    """A witness or group name; None for ``quorum none``."""
    logs: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, source: str = "witness policy") -> WitnessPolicy:
        """Read policy text; InputError (naming the line) when it does not read."""
        witnesses: dict[str, PolicyWitness] = {}
        groups: dict[str, Group] = {}
        size: dict[str, tuple[int, int]] = {}  # group name -> (depth, witness references)
        quorum: str | None = None
        have_quorum = False
        logs: list[str] = []
        for number, raw in enumerate(text.split("\n"), 1):
            fields = raw.split("#", 1)[0].split()
            if not fields:
                continue
            where = f"{source}, line {number}"
            kind, args = fields[0], fields[1:]
            if kind == "log" and len(args) in (1, 2):
                logs.append(args[0])
            elif kind == "witness" and len(args) in (2, 3):
                name = args[0]
                cls._new_name(name, witnesses, groups, where)
                url = _witness_url(args[2], where) if len(args) == 3 else None
                witnesses[name] = PolicyWitness(name, WitnessKey.parse(args[1], source=where),
                                                url)
            elif kind == "group" and len(args) >= 3:
                name, count, members = args[0], args[1], tuple(args[2:])
                cls._new_name(name, witnesses, groups, where)
                for m in members:
                    if m not in witnesses and m not in groups:
                        raise InputError(f"{where}: group {shown_word(name)} names "
                                         f"{shown_word(m)}, which is not defined above it")
                if len(set(members)) != len(members):
                    raise InputError(f"{where}: group {shown_word(name)} names a member "
                                     f"twice")
                n = {"any": 1, "all": len(members)}.get(count)
                if n is None:  # at most 9 digits: int() refuses 4,301 and more
                    n = (int(count) if count.isascii() and count.isdigit() and len(count) < 10
                         else -1)
                if not 1 <= n <= len(members):
                    raise InputError(f"{where}: group {shown_word(name)} threshold "
                                     f"{shown_word(count, 20)} is not any, all or "
                                     f"1..{len(members)}")
                inner = [size.get(m, (0, 1)) for m in members]
                size[name] = (1 + max(d for d, _ in inner), sum(r for _, r in inner))
                if size[name][0] > MAX_DEPTH:
                    raise InputError(f"{where}: group {name} nests groups more than "
                                     f"{MAX_DEPTH} levels deep")
                if size[name][1] > MAX_EXPANDED:
                    raise InputError(f"{where}: group {name} stands for more than "
                                     f"{MAX_EXPANDED} witness references once its groups "
                                     f"are written out")
                groups[name] = Group(name, n, members)
            elif kind == "quorum" and len(args) == 1:
                if have_quorum:
                    raise InputError(f"{where}: a second quorum line")
                have_quorum = True
                if args[0] != "none":
                    if args[0] not in witnesses and args[0] not in groups:
                        raise InputError(f"{where}: quorum names {shown_word(args[0])}, "
                                         f"which is not defined above it")
                    quorum = args[0]
            else:
                # the line itself is not echoed: a field may hold a URL's credentials
                raise InputError(f"{where}: cannot read a line of {len(fields)} field(s) "
                                 f"starting {shown_word(kind, 20)} (expected log, witness, "
                                 f"group or quorum with their fields)")
        if not have_quorum:
            raise InputError(f"{source}: no quorum line (write `quorum none` to require "
                             f"no cosignature)")
        return cls(witnesses, groups, quorum, tuple(logs))

    @staticmethod
    def _new_name(name: str, witnesses: Mapping[str, object], groups: Mapping[str, object],
                  where: str) -> None:
        if name in witnesses or name in groups or name == "none":
            raise InputError(f"{where}: the name {shown_word(name)} is already taken")

    def describe(self, name: str | None = None) -> str:
        """The quorum (or one component) in words: ``2 of (w1, w2, w3)``."""
        name = self.quorum if name is None else name
        if name is None:
            return "no cosignature"
        if name in self.witnesses:
            return f"witness {name}"
        group = self.groups[name]
        inner = ", ".join(m if m in self.witnesses else f"[{self.describe(m)}]"
                          for m in group.members)
        return f"{group.threshold} of ({inner})"

    def judge(self, note: bytes) -> PolicyVerdict:
        """Verify the note's cosignatures by policy witnesses over its exact text and say
        whether the quorum holds. A line naming no policy witness (the log's signature,
        another witness) is not looked at; InputError when the note does not read."""
        text = note_text(note)
        by_key = {(w.key.name, w.key.key_hash): w for w in self.witnesses.values()}
        cosigned: dict[str, int] = {}
        invalid: list[str] = []
        for line in signature_lines(note):
            cosig = read_cosignature(line)
            if cosig is None:
                continue
            witness = by_key.get((cosig.name, cosig.key_hash))
            if witness is None:
                continue
            if verify_cosignature(text, cosig, witness.key):
                cosigned.setdefault(witness.name, cosig.timestamp)
            elif witness.name not in invalid:
                invalid.append(witness.name)
        return PolicyVerdict(satisfied=self._holds(self.quorum, cosigned),
                             cosigned=cosigned, invalid=tuple(invalid),
                             required=self.describe())

    def _holds(self, name: str | None, cosigned: Mapping[str, int]) -> bool:
        if name is None:
            return True
        if name in self.witnesses:
            return name in cosigned
        group = self.groups[name]
        return sum(self._holds(m, cosigned) for m in group.members) >= group.threshold


@dataclass(frozen=True)
class Counted:
    """The stored cosignature lines of one checkpoint that count, and why the others do
    not (one phrase each, for a warning)."""

    lines: tuple[bytes, ...]
    ignored: tuple[str, ...]


def counted_cosignatures(rows: Iterable[tuple[str, str, bytes]], note: bytes,
                         policy: WitnessPolicy | None = None) -> Counted:
    """Which stored cosignature rows (witness, key hash hex, line) of ``note``'s checkpoint
    count: the one rule every reader of the table follows (``checkpoint cosign``,
    ``export``), so a row written by anything but histaudit — the INSERT-only writer role
    can add one — never displaces a witness's real cosignature nor reaches a note.

    A row counts when its line is one cosignature/v1 line naming the row's own witness and
    key hash, and, when ``policy`` knows that witness key, verifies over the note's exact
    text; of the verified rows of one witness key the first (in the order given) is kept.
    A line no policy key can check (no policy, or a witness outside it) is kept on its
    shape alone, every such line: which of them is the witness's is for ``verify
    --witness-policy`` to tell.
    """
    text = note_text(note)
    keys = {} if policy is None else {
        (w.key.name, w.key.key_hash): w.key for w in policy.witnesses.values()}
    lines: list[bytes] = []
    ignored: list[str] = []
    kept: set[tuple[str, bytes]] = set()
    for name, key_hash, line in rows:
        cosig = read_cosignature(line)
        why = None
        if cosig is None:
            why = "is not one cosignature line"
        elif (cosig.name, cosig.key_hash.hex()) != (name, key_hash):
            why = "names another witness key than its row"
        elif (cosig.name, cosig.key_hash) in keys and not verify_cosignature(
                text, cosig, keys[(cosig.name, cosig.key_hash)]):
            why = "does not verify over the checkpoint"
        if why is not None:
            ignored.append(f"a row for witness {name[:80]!r} {why}")
        elif cosig is not None and (cosig.name, cosig.key_hash) not in kept:
            if (cosig.name, cosig.key_hash) in keys:
                kept.add((cosig.name, cosig.key_hash))
            lines.append(line)
    return Counted(tuple(lines), tuple(ignored))


def read_policy(path: str) -> WitnessPolicy:
    """Read a policy file; InputError when it cannot be read or does not read."""
    data = read_limited(path, "witness policy", POLICY_LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"witness policy {path} is not UTF-8 text") from None
    return WitnessPolicy.parse(text, source=f"witness policy {path}")


def _witness_url(url: str, where: str) -> str:
    """An add-checkpoint base URL, ending in ``/``; InputError unless http(s) with a host
    and a valid port, and free of control characters."""
    check_url_text(url, f"{where}: the witness URL")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port outside 0..65535
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{where}: witness URL {shown_url(url, user=False)[:80]!r} is not "
                         f"an http(s) URL with a host and a valid port")
    return url if url.endswith("/") else url + "/"


def witness_findings(policy: WitnessPolicy, note: bytes, *, where: str,
                     contradicted_by: Report | None = None) -> tuple[Finding, ...]:
    """The policy's findings on ``note``, plus ``witnessed-checkpoint-contradicted`` when
    its quorum cosigned it and ``contradicted_by`` (the consistency proof against it)
    found the ledger rolled back or forked: independent witnesses vouched for that tree,
    so the ledger, not the note, is what changed."""
    verdict = policy.judge(note)
    found = list(verdict.findings(where))
    contradictions = [] if contradicted_by is None else [
        f for f in contradicted_by.findings if f.code in _CONTRADICTIONS]
    if verdict.satisfied and verdict.cosigned and contradictions:
        found.append(Finding.make(
            "witnessed-checkpoint-contradicted", LEDGER, None,
            f"{where} was cosigned by {', '.join(sorted(verdict.cosigned))} ("
            f"{verdict.required}), and the ledger contradicts it "
            f"({', '.join(sorted({f.code for f in contradictions}))})"))
    return tuple(found)


def witness_report(policy: WitnessPolicy, note: bytes, *, where: str) -> Report:
    """A ledger-scope report of the policy's verdict on ``note`` (its findings only)."""
    return Report(instance_id=f"({LEDGER})", entries=0, mode="witness policy",
                  findings=witness_findings(policy, note, where=where), scope=Scope.LEDGER)
