"""An instance's entries as a person reads them: filtered, with payload values if asked.

``histaudit show`` is built on this. It reads stored rows (from a ledger or a bundle) and
a payload lookup, never a database itself, so the same code serves both. It verifies
nothing: ``histaudit verify`` does that; this only says what the rows say.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from histaudit.errors import HistauditError, UsageError

from . import records as rec
from .kinds import Kind

__all__ = ["EntryFilter", "PayloadState", "PayloadValue", "Timeline", "TimelineEntry",
           "build", "kinds_named", "parse_seq_range"]

PayloadLookup = Callable[[str], tuple[bytes, bytes] | None]
"""commitment -> (salt, bytes) as stored, or None when not stored (erased or absent)."""

_FAMILIES = sorted({k.value.split(".", 1)[0] for k in Kind})
# entry numbers fit in 64 bits, so 20 digits at most (and int() refuses 4,300 and more)
_SEQ = re.compile(r"([0-9]{0,20})\.\.([0-9]{0,20})|([0-9]{1,20})")
r"""ASCII digits only: ``\d`` would take ``٣`` (Arabic-Indic three) too, which int() reads."""


def kinds_named(name: str) -> tuple[str, ...]:
    """The entry kinds ``name`` means: one kind (``activity.started``) or every kind of a
    family (``activity``, ``activity.``, ``effect``). An unknown name is a UsageError."""
    if name in {k.value for k in Kind}:
        return (name,)
    family = name.removesuffix(".")
    if family in _FAMILIES:
        return tuple(k.value for k in Kind if k.value.startswith(family + "."))
    raise UsageError(f"unknown entry kind {rec.shown_id(name)} (kinds: "
                     f"{', '.join(k.value for k in Kind)}; or a family: "
                     f"{', '.join(_FAMILIES)})")


def parse_seq_range(text: str) -> tuple[int | None, int | None]:
    """``A..B`` (inclusive; either side may be left out: ``10..``, ``..20``) or ``N``, as
    (first, last) with None for an open side. Anything else is a UsageError."""
    m = _SEQ.fullmatch(text.strip())
    if m is None or m.group(0) == "..":
        raise UsageError(f"--seq {rec.shown_id(text)} is not a range: write A..B, A.., ..B "
                         f"or N (entry numbers from 1)")
    first: int | None
    last: int | None
    if m.group(3) is not None:
        first = last = int(m.group(3))
    else:
        first = int(m.group(1)) if m.group(1) else None
        last = int(m.group(2)) if m.group(2) else None
    if first == 0 or last == 0:
        raise UsageError(f"--seq {rec.shown_id(text)}: entries are numbered from 1")
    if first is not None and last is not None and first > last:
        raise UsageError(f"--seq {rec.shown_id(text)}: {first} is after {last}")
    return first, last


@dataclass(frozen=True, kw_only=True)
class EntryFilter:
    """Which entries to show; every condition given must hold (an empty filter keeps all).

    ``kinds`` are exact kind strings (see :func:`kinds_named`); ``task`` and ``activity``
    match the entry data's ``task_id`` and ``activity``; ``first``/``last`` bound the
    signed ``seq``, inclusively.
    """

    kinds: frozenset[str] | None = None
    task: int | None = None
    activity: str | None = None
    first: int | None = None
    last: int | None = None

    @classmethod
    def parse(cls, *, kinds: Iterable[str] = (), task: int | None = None,
              activity: str | None = None, seq: str | None = None) -> EntryFilter:
        """A filter from command-line values; bad ones raise UsageError."""
        names = list(kinds)
        wanted = frozenset(k for n in names for k in kinds_named(n)) if names else None
        first, last = parse_seq_range(seq) if seq is not None else (None, None)
        return cls(kinds=wanted, task=task, activity=activity, first=first, last=last)

    def keeps_seq(self, seq: int) -> bool:
        return ((self.first is None or seq >= self.first)
                and (self.last is None or seq <= self.last))

    def keeps(self, entry: rec.Entry) -> bool:
        return (self.keeps_seq(entry.seq)
                and (self.kinds is None or entry.kind in self.kinds)
                and (self.task is None or _is_int(entry.data.get("task_id"), self.task))
                and (self.activity is None or entry.data.get("activity") == self.activity))

    @property
    def by_content(self) -> bool:
        """Whether it filters on what an entry says (kind, task, activity), which a row
        that does not parse cannot be matched on."""
        return self.kinds is not None or self.task is not None or self.activity is not None

    def as_json(self) -> dict[str, Any]:
        return {"kinds": None if self.kinds is None else sorted(self.kinds),
                "task": self.task, "activity": self.activity,
                "seq": (None if self.first is None and self.last is None
                        else {"from": self.first, "to": self.last})}


def _is_int(value: object, wanted: int) -> bool:
    return type(value) is int and value == wanted


class PayloadState:
    """What is known of a payload an entry commits to (plain strings, stable in JSON)."""

    KEPT = "kept"
    """Stored, and it matches the signed commitment: the value is shown."""
    ERASED = "erased"
    """Not stored, and a ``payload.erased`` entry of the instance names its commitment."""
    ABSENT = "absent"
    """Not stored, and no erasure says why."""
    MISMATCH = "mismatch"
    """Stored bytes that do not match the signed commitment: not shown as the value."""


@dataclass(frozen=True)
class PayloadValue:
    state: str
    data: bytes | None = None

    def text(self) -> str | None:
        """The value as text when it is UTF-8, else None."""
        if self.data is None:
            return None
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            return None


@dataclass(frozen=True)
class TimelineEntry:
    """One entry as read: ``error`` is set (and kind, ts, kid are None) for a row whose
    body does not parse. ``hash`` is the SHA-256 of the stored body."""

    seq: int
    ts: str | None
    kind: str | None
    kid: str | None
    data: Mapping[str, Any]
    hash: str
    error: str | None = None
    payloads: Mapping[str, PayloadValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Timeline:
    instance: str
    entries: tuple[TimelineEntry, ...]
    filter: EntryFilter
    stored: int
    """How many rows the instance has, shown or not."""


def payload_refs(data: Mapping[str, Any]) -> dict[str, str]:
    """field -> commitment of every committed payload (``{"c": …, "n": …}``) in ``data``."""
    return {k: v["c"] for k, v in data.items()
            if isinstance(v, dict) and isinstance(v.get("c"), str)}


def build(instance: str, rows: Iterable[rec.StoredEntry], keep: EntryFilter, *,
          payloads: PayloadLookup | None = None,
          observe: Callable[[rec.Entry], None] | None = None) -> Timeline:
    """The timeline of ``instance`` from its ``rows`` (streamed; only kept entries are held),
    with payload values looked up through ``payloads`` when given (after the rows are
    read, so a lookup may use the connection the rows came through). ``observe`` is
    handed every entry that parses, kept or not (``show``'s summary of the instance)."""
    kept: list[TimelineEntry] = []
    erased: set[str] = set()
    stored = 0
    for row in rows:
        stored += 1
        try:
            e = rec.parse_entry(row.body)
        except HistauditError as exc:
            if keep.keeps_seq(row.seq) and not keep.by_content:
                kept.append(TimelineEntry(seq=row.seq, ts=None, kind=None, kid=None,
                                          data={}, hash=rec.sha256_hex(row.body),
                                          error=str(exc)))
            continue
        if observe is not None:
            observe(e)
        if e.kind == Kind.PAYLOAD_ERASED and isinstance(e.data.get("commitment"), str):
            erased.add(e.data["commitment"])
        if keep.keeps(e):
            kept.append(TimelineEntry(seq=e.seq, ts=e.ts, kind=e.kind, kid=e.kid,
                                      data=dict(e.data), hash=rec.sha256_hex(row.body)))
    if payloads is not None:
        kept = [_with_payloads(t, payloads, erased) for t in kept]
    return Timeline(instance=instance, entries=tuple(kept), filter=keep, stored=stored)


def _with_payloads(entry: TimelineEntry, lookup: PayloadLookup,
                   erased: set[str]) -> TimelineEntry:
    values = {}
    for name, commitment in payload_refs(entry.data).items():
        found = lookup(commitment)
        if found is None:
            values[name] = PayloadValue(PayloadState.ERASED if commitment in erased
                                        else PayloadState.ABSENT)
        elif rec.commitment_matches(commitment, found[1], found[0]):
            values[name] = PayloadValue(PayloadState.KEPT, found[1])
        else:
            values[name] = PayloadValue(PayloadState.MISMATCH)
    return dataclasses.replace(entry, payloads=values)
