"""Behaviour events on disk, for an instance too long to analyse in memory.

Past the threshold (:class:`~histaudit.verify.behaviour_events.Events`) events leave
memory in batches, into one temporary directory that :meth:`Spill.close` removes (as
does the directory's finalizer should ``close`` never run). One mechanism serves every
kind of event: each batch is appended to a log, and what could give an event's task,
effect or decision a finding is kept in a form that is cheap to test at the end:

* a **repeat**: the hash of each start's and each result's task key, each ``effect.done``'s
  effect (``name``, ``key``) and each decision's identity goes into one of 64 arrays of
  8-byte integers (chosen by the hash), written to files when they grow large. A task,
  effect or decision with a finding has two starts or results, two dones, two
  signings — its hash occurs twice in one array;
* an **effect skipped**: its hash, kept as it comes (a skip is a finding);
* an **intent never closed**: each intent's (``name``, ``key``, entry) and each closing's
  (``name``, ``key``, intent it names) go to 64 partitions by hash, to files past a size;
  each partition is read back alone and its intents not among its closings — compared by
  value, not by hash — are the open ones.

Only if something turned up is the log read back, keeping the events of those hashes
(and of the tasks of those effects' intents), for the in-memory code itself to analyse
(:func:`~histaudit.verify.behaviour_events.tasks_in_memory` and its siblings): a hash
shared by two keys just brings both in, each complete, so the findings are exact. A
clean instance costs a hash or a tuple per event and one pass over the arrays.
"""

from __future__ import annotations

import array
import collections
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
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
    TaskView,
    decisions_in_memory,
    effects_in_memory,
    task_views,
    tasks_in_memory,
)

_PARTS = 64
# held in memory before a write to the files: 4 hash sets × 256 KiB and ~0.5 MiB of
# intents and closings (at 1 << 17 and 1 << 14, figure 4a was 66 MiB against 59 now)
_HASHES_IN_MEMORY = 1 << 15
_PAIRS_IN_MEMORY = 1 << 12


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


class _Pairs:
    """Intents and closings as (name, key, entry) tuples in :data:`_PARTS` partitions by
    hash, each side written to its files past a size: a join read a partition at a time."""

    def __init__(self, directory: Path) -> None:
        self._files = [(directory / f"intents-{i}.log", directory / f"closings-{i}.log")
                       for i in range(_PARTS)]
        self._parts: list[tuple[list[Any], list[Any]]] = [([], []) for _ in range(_PARTS)]
        self._held = 0

    def add(self, effects: Iterable[EffectEvent]) -> None:
        parts, n = self._parts, 0
        for _o, name, key, kind, seq, intent, _tid, _eid in effects:
            if kind == INTENT:
                pair = (name, key, seq)
                parts[hash(pair) % _PARTS][0].append(pair)
            elif intent is not None:
                pair = (name, key, intent)
                parts[hash(pair) % _PARTS][1].append(pair)
            n += 1
        self._held += n
        if self._held >= _PAIRS_IN_MEMORY:
            for (intents, closings), (ipath, cpath) in zip(self._parts, self._files,
                                                           strict=True):
                for side, path in ((intents, ipath), (closings, cpath)):
                    if side:
                        with path.open("ab") as f:
                            _dump(side, f)
                        side.clear()
            self._held = 0

    def open_effects(self) -> set[int]:
        """The hash of the (name, key) of every effect with an intent that no closing of
        that effect names."""
        out: set[int] = set()
        for (intents, closings), (ipath, cpath) in zip(self._parts, self._files,
                                                       strict=True):
            closed = {tuple(pair) for pair in _read(cpath)}
            closed.update(closings)
            for name, key, seq in (*_read(ipath), *intents):
                if (name, key, seq) not in closed:
                    out.add(hash((name, key)))
        return out


class Spill:
    """One instance's behaviour events in a temporary directory."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="histaudit-behaviour-")
        path = Path(self._dir.name)
        self._log_path = path / "events.log"
        self._log = self._log_path.open("wb")
        self._starts, self._results = _Hashes(path, "starts"), _Hashes(path, "results")
        self._done, self._decisions = _Hashes(path, "done"), _Hashes(path, "decisions")
        self._skipped: set[int] = set()
        self._pairs = _Pairs(path)

    def add(self, starts: list[Start], results: list[Result],
            effects: list[EffectEvent], ran: list[Ran], decisions: list[Decision]) -> None:
        if not (starts or results or effects or ran or decisions):
            return
        _dump((starts, results, ran, effects, decisions), self._log)
        self._starts.add([hash((e[1], e[2])) for e in starts])
        self._results.add([hash((e[1], e[2])) for e in results])
        self._decisions.add([hash(d[1]) for d in decisions])
        if effects:
            self._done.add([hash((e[1], e[2])) for e in effects if e[3] == DONE])
            self._skipped.update(hash((e[1], e[2])) for e in effects if e[3] == SKIPPED)
            self._pairs.add(effects)

    def views(self) -> tuple[list[TaskView], list[EffectView], list[DecisionView]]:
        self._log.close()
        wanted_effects = self._done.repeated() | self._skipped | self._pairs.open_effects()
        wanted_tasks = self._starts.repeated() | self._results.repeated()
        wanted_decisions = self._decisions.repeated()
        effects: list[Any] = []
        if wanted_effects:
            for batch in _load(self._log_path):
                effects += (e for e in batch[3] if hash((e[1], e[2])) in wanted_effects)
            # an intent's finding depends on its task's starts: bring those tasks in whole
            wanted_tasks.update(hash((e[6], e[7])) for e in effects if e[3] == INTENT)
        starts: list[Any] = []
        results: list[Any] = []
        ran: list[Any] = []
        decisions: list[Any] = []
        if wanted_tasks or wanted_decisions:
            for batch_starts, batch_results, batch_ran, _effects, batch_decisions in _load(
                    self._log_path):
                starts += (e for e in batch_starts if hash((e[1], e[2])) in wanted_tasks)
                results += (e for e in batch_results if hash((e[1], e[2])) in wanted_tasks)
                ran += (e for e in batch_ran if hash((e[1], e[2])) in wanted_tasks)
                decisions += (d for d in batch_decisions if hash(d[1]) in wanted_decisions)
        tasks = tasks_in_memory(starts, results, ran)
        return (task_views(tasks), effects_in_memory(effects, tasks),
                decisions_in_memory(decisions))

    def close(self) -> None:
        self._log.close()
        self._dir.cleanup()


def _dump(batch: object, log: BinaryIO) -> None:
    """One batch to the log: orjson (it reads back the same str, int, float and None, a
    tuple as a list), or pickle for what orjson cannot write (an integer beyond 64 bits: a
    task id like 1e300 stands for one; the bytes that stand for an unhashable task id)."""
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


def _read(path: Path) -> Iterator[Any]:
    """Every item of every batch :func:`_dump` appended to ``path`` (none if absent)."""
    if path.exists():
        for batch in _load(path):
            yield from batch
