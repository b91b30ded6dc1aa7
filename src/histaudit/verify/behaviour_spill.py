"""Behaviour events on disk, for an instance too long to analyse in memory.

Past the threshold (:class:`~histaudit.verify.behaviour_events.Events`) events leave
memory in batches, into one temporary directory that :meth:`Spill.close` removes (as
does the directory's finalizer should ``close`` never run):

* **Task events** are pickled to a log, and the hash of each one's task key goes into
  one of 64 arrays of 8-byte integers (chosen by the hash), written to files when they
  grow large. A task with a finding has two starts or two results, so its hash occurs
  twice in one array; at the end each array is checked for repeated hashes, one at a
  time, and only if some repeat is the log read back, keeping the events of those hashes
  (and of the tasks of open intents). They are analysed by the in-memory code itself
  (:func:`~histaudit.verify.behaviour_events.tasks_in_memory`): a hash shared by two
  tasks just brings both in, each complete. A clean instance costs a hash per event and
  one pass over the arrays.
* **Decisions** go to a second SQLite table, whose GROUP BY names those signed twice.
* **Effect events** go to a SQLite table, whose indexed GROUP BYs name the effects done
  twice or skipped, and — exactly, by an anti-join, not by hash — the intents never
  closed. Equality in SQLite is the dict's here: effect names and keys are ``str``;
  entry numbers are integers, those beyond SQLite's 64 bits (orjson reads up to
  2**64 - 1) stored as 8 big-endian bytes, a BLOB, which sorts after every INTEGER and
  among its kind by value; a task key is stored as what it stands for (``None``, int,
  float, str), an integer beyond 64 bits as ``\\x02`` + its digits.
"""

from __future__ import annotations

import array
import collections
import itertools
import os
import pickle
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .behaviour_events import (
    DONE,
    INTENT,
    SKIPPED,
    Decision,
    DecisionView,
    EffectEvent,
    EffectView,
    Ran,
    Result,
    Start,
    Tasks,
    TaskView,
    Uncertain,
    ran_again,
    retry_of,
    task_views,
    tasks_in_memory,
)
from .behaviour_events import uncertain as open_intent

_SCHEMA = (
    "PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE", "PRAGMA cache_size = -512",
    "PRAGMA temp_store = FILE",
    "CREATE TABLE effects (o INTEGER PRIMARY KEY, name, key, kind, seq, intent, tid, eid)",
    "CREATE TABLE decisions (o INTEGER PRIMARY KEY, ident, seq, label, tid, activity)",
)
_INDEX = "CREATE INDEX effects_intent ON effects (name, key, intent)"
_DECISION_INDEX = "CREATE INDEX decisions_ident ON decisions (ident)"
# each decision signed twice: its first event, and its entries in order
_RESIGNED = "SELECT ident, min(o) AS first FROM decisions GROUP BY ident HAVING count(*) > 1"
_DECISION_ROWS = "SELECT seq, label, tid, activity FROM decisions WHERE ident = ? ORDER BY o"
_EFFECTS = f"""
    SELECT name, key FROM effects WHERE kind = {DONE} GROUP BY name, key HAVING count(*) > 1
    UNION
    SELECT name, key FROM effects WHERE kind = {SKIPPED}"""
# intents by (effect, seq), the last one written for a seq winning, never closed
_OPEN_INTENTS = f"""
    SELECT i.name, i.key, i.seq, i.tid, i.eid, i.o FROM (
        SELECT name, key, seq, tid, eid, max(o) AS o FROM effects WHERE kind = {INTENT}
        GROUP BY name, key, seq) AS i
    WHERE NOT EXISTS (SELECT 1 FROM effects AS c WHERE c.name = i.name AND c.key = i.key
                      AND c.intent = i.seq AND c.kind <> {INTENT})"""
_FIRST_EFFECT = "SELECT min(o) FROM effects WHERE name = ? AND key = ?"
_EFFECT_SEQS = "SELECT seq FROM effects WHERE name = ? AND key = ? AND kind = ? ORDER BY o"
_CLOSINGS_AFTER = f"""
    SELECT o, kind, seq FROM effects WHERE name = ? AND key = ? AND o > ?
    AND kind IN ({DONE}, {SKIPPED}) ORDER BY o"""

_ROWS_PER_INSERT = 256
_INT64 = range(-(2**63), 2**63)
_PARTS = 64
_HASHES_IN_MEMORY = 1 << 17


class _Hashes:
    """64-bit hashes in :data:`_PARTS` arrays by value, written to files past a size."""

    def __init__(self, directory: Path, name: str) -> None:
        self._files = [directory / f"{name}-{i}.q" for i in range(_PARTS)]
        self._parts = [array.array("q") for _ in range(_PARTS)]
        self._held = 0

    def add(self, hashes: list[int]) -> None:
        parts = self._parts
        for h in hashes:
            parts[h % _PARTS].append(h)
        self._held += len(hashes)
        if self._held >= _HASHES_IN_MEMORY:
            for part, path in zip(self._parts, self._files, strict=True):
                with path.open("ab") as f:
                    part.tofile(f)
                del part[:]
            self._held = 0

    def repeated(self) -> set[int]:
        """Every hash that occurs more than once."""
        out: set[int] = set()
        for part, path in zip(self._parts, self._files, strict=True):
            whole = array.array("q")
            if path.exists():
                with path.open("rb") as f:
                    whole.fromfile(f, os.path.getsize(path) // whole.itemsize)
            whole.extend(part)
            if len(set(whole)) < len(whole):
                out.update(h for h, n in collections.Counter(whole).items() if n > 1)
        return out


class Spill:
    """One instance's behaviour events in a temporary directory."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="histaudit-behaviour-")
        path = Path(self._dir.name)
        self.db = sqlite3.connect(path / "effects.db", isolation_level=None)
        for statement in _SCHEMA:
            self.db.execute(statement)
        self.db.execute("BEGIN")
        self._log_path = path / "tasks.pickle"
        self._log = self._log_path.open("wb")
        self._starts, self._results = _Hashes(path, "starts"), _Hashes(path, "results")

    def add(self, starts: list[Start], results: list[Result],
            effects: list[EffectEvent], ran: list[Ran], decisions: list[Decision]) -> None:
        if starts or results or ran:
            _dump((starts, results, ran), self._log)
            self._starts.add([hash((e[1], e[2])) for e in starts])
            self._results.add([hash((e[1], e[2])) for e in results])
        _insert(self.db, effects)
        if decisions:
            self.db.executemany("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?)",
                                [(o, ident, _wide_number(seq), label, _wide_key(tid), activity)
                                 for o, ident, seq, label, tid, activity in decisions])

    def views(self) -> tuple[list[TaskView], list[EffectView], list[DecisionView]]:
        self._log.close()
        self.db.execute(_INDEX)
        open_intents = self._open_intents()
        wanted = self._starts.repeated() | self._results.repeated()
        wanted.update(hash((tid, eid)) for _n, _k, _s, tid, eid, _o in open_intents)
        tasks = self._tasks(wanted) if wanted else {}
        uncertain: dict[tuple[str, str], list[Uncertain]] = {}
        for name, key, seq, tid, eid, o in open_intents:
            if ran_again(tasks, (tid, eid), seq):
                closings = ((o, kind, _number(at)) for o, kind, at
                            in self.db.execute(_CLOSINGS_AFTER, (name, key, o)))
                uncertain.setdefault((name, key), []).append(
                    open_intent(seq, retry_of(closings, o), tasks[(tid, eid)]))
        return task_views(tasks), self._effects(uncertain), self._decisions()

    def _decisions(self) -> list[DecisionView]:
        self.db.execute(_DECISION_INDEX)
        out = []
        for ident, first in self.db.execute(_RESIGNED).fetchall():
            rows = self.db.execute(_DECISION_ROWS, (ident,)).fetchall()
            _seq, label, tid, activity = rows[0]
            out.append(DecisionView(int(first), str(label), len(rows),
                                    [_number(row[0]) for row in rows[:6]],
                                    _key(tid), activity))
        out.sort(key=lambda v: v.first_o)
        return out

    def _open_intents(self) -> list[tuple[str, str, int, Any, Any, int]]:
        """Every intent never closed, ordered as the analyzer visits them (effect by first
        event, then by entry number), with its event number."""
        found = [(self._first_o(name, key), _number(seq), name, key, _key(tid), _key(eid), o)
                 for name, key, seq, tid, eid, o in self.db.execute(_OPEN_INTENTS)]
        found.sort(key=lambda f: f[:2])
        return [(name, key, seq, tid, eid, o) for _f, seq, name, key, tid, eid, o in found]

    def _tasks(self, wanted: set[int]) -> Tasks:
        """The events of every task whose key hashes into ``wanted``, analysed."""
        def kept(events: Iterator[tuple[Any, ...]]) -> Iterator[Any]:
            return (e for e in events if hash((e[1], e[2])) in wanted)

        starts: list[Start] = []
        results: list[Result] = []
        ran: list[Ran] = []
        for batch_starts, batch_results, batch_ran in _load(self._log_path):
            starts += kept(batch_starts)
            results += kept(batch_results)
            ran += kept(batch_ran)
        return tasks_in_memory(starts, results, ran)

    def _effects(self, uncertain: dict[tuple[str, str], list[Uncertain]]
                 ) -> list[EffectView]:
        keys = {(name, key) for name, key in self.db.execute(_EFFECTS)} | set(uncertain)
        views = [self._effect(name, key, uncertain.get((name, key), [])) for name, key in keys]
        views.sort(key=lambda v: v.first_o)
        return views

    def _first_o(self, name: str, key: str) -> int:
        return int(self.db.execute(_FIRST_EFFECT, (name, key)).fetchone()[0])

    def _effect(self, name: str, key: str, uncertain: list[Uncertain]
                ) -> EffectView:
        done = [_number(seq) for (seq,) in self.db.execute(_EFFECT_SEQS, (name, key, DONE))]
        skipped = self.db.execute(_EFFECT_SEQS, (name, key, SKIPPED))
        first_skipped = next(skipped, None)
        more = sum(1 for _ in skipped)
        return EffectView(self._first_o(name, key), name, key, len(done), done[:6], uncertain,
                          0 if first_skipped is None else 1 + more,
                          0 if first_skipped is None else _number(first_skipped[0]))

    def close(self) -> None:
        self._log.close()
        self.db.close()
        self._dir.cleanup()


def _dump(batch: object, log: BinaryIO) -> None:
    """One batch to the log: orjson (it reads back the same str, int, float and None), or
    pickle for an integer orjson cannot write (a task id like 1e300 stands for one)."""
    try:
        data, tag = orjson.dumps(batch), b"j"
    except orjson.JSONEncodeError:
        data, tag = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL), b"p"
    log.write(tag + len(data).to_bytes(8, "big") + data)


def _load(path: Path) -> Iterator[Any]:
    with path.open("rb") as log:
        while head := log.read(9):
            data = log.read(int.from_bytes(head[1:], "big"))
            yield orjson.loads(data) if head[:1] == b"j" else pickle.loads(data)


def _insert(db: sqlite3.Connection, rows: Sequence[EffectEvent]) -> None:
    """Many rows per INSERT statement: a third of executemany's cost per row."""
    if not rows:
        return
    one = "INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    many = "INSERT INTO effects VALUES " + ", ".join(
        ["(?, ?, ?, ?, ?, ?, ?, ?)"] * _ROWS_PER_INSERT)
    whole = len(rows) - len(rows) % _ROWS_PER_INSERT
    flat = itertools.chain.from_iterable
    for i in range(0, whole, _ROWS_PER_INSERT):
        chunk = rows[i:i + _ROWS_PER_INSERT]
        try:
            db.execute(many, tuple(flat(chunk)))
        except OverflowError:
            db.execute(many, tuple(flat(map(_widened, chunk))))
    try:
        db.executemany(one, rows[whole:])
    except OverflowError:  # after the rows before the one that overflowed went in
        db.executemany(one.replace("INSERT", "INSERT OR IGNORE"), map(_widened, rows[whole:]))


def _widened(row: EffectEvent) -> tuple[Any, ...]:
    """``row`` with every integer outside 64 bits as the BLOB the module doc describes."""
    o, name, key, kind, seq, intent, tid, eid = row
    return (o, name, key, kind, _wide_number(seq), _wide_number(intent), _wide_key(tid),
            _wide_key(eid))


def _wide_number(value: Any) -> Any:
    if value.__class__ is int and value not in _INT64:
        return value.to_bytes(8, "big")
    return value


def _wide_key(value: Any) -> Any:
    if value.__class__ is int and value not in _INT64:
        return b"\x02" + str(value).encode()
    return value


def _number(value: Any) -> int:
    return int.from_bytes(value, "big") if value.__class__ is bytes else int(value)


def _key(value: Any) -> Any:
    """A task key part read back: what ``_wide_key`` stored, as it was."""
    if value.__class__ is bytes and value[:1] == b"\x02":
        return int(value[1:])
    return value
