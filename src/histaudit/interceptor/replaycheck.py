"""The live replay check: results the engine feeds back against their signed completions.

While a workflow replays, every activity result the engine feeds back is compared with
the signed completion of that task; a result that is not the one signed is recorded as
``replay.mismatch``, which the verifier reports as ``replay-mismatch``.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import operator
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from histaudit.ledger import records as rec
from histaudit.ledger import sha
from histaudit.ledger.kinds import Kind

from .recorder import AuditRecorder, worker_id

__all__ = ["ReplayedResultCheck"]

log = logging.getLogger("histaudit.interceptor")

class ReplayedResultCheck:
    """Compares activity results the engine feeds back with their signed completions.

    Every ``TaskCompleted`` event in the history the engine hands the app (old events
    and new ones) is matched to the ``activity.completed`` entries of the same task id
    (and the SDK's task execution id, when both carry one). The result text the workflow
    is about to read must be one of the signed outputs: compared by the keyed digest for
    entries signed with this runtime's key, else by the stored payload against its
    commitment. If none matches, one ``replay.mismatch`` entry is signed (task id,
    activity, expected and seen digests, the seq of the signed completion, and a
    commitment to the seen result); the same mismatch is not recorded twice.

    A result whose execution id is not the one the history's ``TaskScheduled`` of that
    task carries is the result of another execution of the task id: daprd 1.18 can hand a
    generation that continued as new the late result of the previous generation's task
    of the same id (its activity actors are per generation, their completions name only
    the task id). It is a signed output, but not of the task the workflow is waiting
    for: it is recorded as a mismatch too (``scheduled_execution_id`` says which execution
    was scheduled), before any memory of it as a good result of the earlier execution.

    Results with no signed completion (an unaudited activity, another app's) are left to
    ``histaudit verify --engine``. The check records evidence and never stops the
    workflow: raising here would fail history resolution, and with it the workflow.
    A result seen and found good is not looked up again by this process, and
    :meth:`check_turn` does not even read again the events of a turn's committed history
    that are the very objects it checked in the instance's last turn (see there).
    """

    _MAX_PREFIXES = 256
    _MAX_PREFIX_EVENTS = 200_000
    """Bounds on the checked histories remembered (instances, events held), least
    recently checked dropped first: a dropped one is only read in full again."""

    _MAX_REMEMBERED = 100_000
    _SHORT = 128
    """Results up to this many characters are remembered as they are, longer ones by their
    SHA-256: comparing a short string costs less than hashing it."""

    def __init__(self, recorder: AuditRecorder) -> None:
        self.recorder = recorder
        self._good: dict[tuple[str, int, str], str | bytes] = {}
        self._lock = threading.Lock()
        self._prefixes: OrderedDict[str, tuple[tuple[Any, ...], dict[int, str]]] = \
            OrderedDict()
        self._prefix_events = 0

    def check_turn(self, instance: str, committed: Sequence[Any], new: Iterable[Any]) -> int:
        """:meth:`check` of one workflow turn: its committed history, then its new events.

        The SDK keeps each instance's committed history between turns and the engine sends
        only what was added (a delta), so a turn's history normally starts with the very
        event objects of the last one. Those of them up to the first result not found
        good last turn were checked then, and are what the workflow reads now: they are
        recognized by identity (a remembered copy of the list keeps them alive, so an
        identity cannot be reused) and skipped. Anything else — a full resend, a history fetched
        anew, another generation, a process with empty memory — is checked in full.
        """
        skip, scheduled = self._checked_prefix(instance, committed)
        events = itertools.chain(itertools.islice(committed, skip, None), new)
        count, first_open = self._check(instance, events, scheduled)
        clean = len(committed) if first_open is None else min(skip + first_open,
                                                              len(committed))
        self._remember_prefix(instance, committed, clean, scheduled)
        return count

    def _checked_prefix(self, instance: str, committed: Sequence[Any]
                        ) -> tuple[int, dict[int, str]]:
        """How many leading events of ``committed`` are the objects checked clean before,
        and the execution ids of the tasks scheduled in the history read then (a copy:
        the history of one generation only grows, so they hold for this turn too)."""
        with self._lock:
            known = self._prefixes.get(instance)
        if known is None:
            return 0, {}
        events, scheduled = known
        clean = len(events)
        if clean > len(committed) or not all(map(operator.is_, itertools.islice(
                committed, clean), itertools.islice(events, clean))):
            return 0, {}
        return clean, dict(scheduled)

    def _remember_prefix(self, instance: str, committed: Sequence[Any], clean: int,
                         scheduled: dict[int, str]) -> None:
        with self._lock:
            old = self._prefixes.pop(instance, None)
            if old is not None:
                self._prefix_events -= len(old[0])
            if not clean or clean > self._MAX_PREFIX_EVENTS:
                return
            # a copy: what was checked stays what is compared, whatever becomes of the list
            self._prefixes[instance] = (tuple(committed[:clean]), scheduled)
            self._prefix_events += clean
            while (len(self._prefixes) > self._MAX_PREFIXES
                   or self._prefix_events > self._MAX_PREFIX_EVENTS):
                _, (dropped, _) = self._prefixes.popitem(last=False)
                self._prefix_events -= len(dropped)

    def check(self, instance: str, events: Iterable[Any]) -> int:
        """Check the ``TaskCompleted`` events among ``events``; return mismatches recorded.

        The SDK replays a workflow's whole history on every turn, so this runs over every
        completion so far, each turn: the loop touches as few protobuf fields as it can
        (a non-completion event reads back task id 0), and a result already found good is
        recognized by its text (or the digest of a long one) without a ledger lookup.
        """
        return self._check(instance, events, {})[0]

    def _check(self, instance: str, events: Iterable[Any], scheduled: dict[int, str]
               ) -> tuple[int, int | None]:
        """:meth:`check`; also the index (in ``events``) of the first result still not
        found good afterwards (None: every one was). ``scheduled`` (task id: execution
        id of its ``TaskScheduled``) is what earlier events scheduled, and gains these."""
        todo = []
        where = []
        other: list[tuple[int, str, str, str]] = []
        first_other = None
        good, short = self._good, self._SHORT
        for index, event in enumerate(events):
            done = event.taskCompleted
            task_id = done.taskScheduledId
            if not task_id and not event.HasField("taskCompleted"):
                ordered = event.taskScheduled.taskExecutionId  # "" when not a schedule
                if ordered:
                    scheduled[event.eventId] = ordered
                continue
            text = done.result.value
            execution = done.taskExecutionId
            ordered = scheduled.get(task_id)
            if ordered and execution and ordered != execution:
                other.append((task_id, execution, ordered, text))
                if first_other is None:
                    first_other = index
                continue
            seen = text if len(text) <= short else _digest(text)
            key = (instance, task_id, execution)
            if good.get(key) != seen:
                todo.append((key, text, seen))
                where.append(index)
        # never taken as clean: fed back again, looked at again (and recorded once)
        recorded = self._record_other(instance, other) if other else 0
        if not todo:
            return recorded, first_other
        task_ids = {key[1] for key, _, _ in todo}
        # Answered from memory when this process signed (or read) every completion asked
        # about; a result memory cannot vouch for is judged again on a fresh read of the
        # chain before anything is recorded (another process may have signed it).
        count = self._judge(instance, todo, self._signed(instance, task_ids, fresh=False),
                            final=False)
        if count is None:
            count = self._judge(instance, todo, self._signed(instance, task_ids, fresh=True),
                                final=True)
        first_open = next((index for index, (key, _, seen) in zip(where, todo)
                           if good.get(key) != seen), None)
        if first_other is not None:
            first_open = first_other if first_open is None else min(first_open, first_other)
        return recorded + (count or 0), first_open

    def _judge(self, instance: str, todo: list[tuple[tuple[str, int, str], str, str | bytes]],
               signed: tuple[dict[int, list[rec.Entry]], set[Any]], *, final: bool
               ) -> int | None:
        """Compare each result with its signed completions; record a mismatch only when
        ``final`` (else return None at the first one)."""
        completions, recorded = signed
        count = 0
        for key, text, seen in todo:
            _, task_id, execution_id = key
            mine = [e for e in completions.get(task_id, ())
                    if not (execution_id and e.data.get("execution_id"))
                    or e.data.get("execution_id") == execution_id]
            if not mine:
                if not final:
                    return None  # perhaps signed by another process: read before judging
                count += self._copied(instance, key, text, seen)
                continue
            raw = text.encode("utf-8") if text != "" else None
            if any(self._same(instance, e, raw) for e in mine):
                with self._lock:
                    if len(self._good) >= self._MAX_REMEMBERED:
                        self._good.clear()
                    self._good[key] = seen
                continue
            if not final:
                return None
            last = mine[-1]
            count += self._record(instance, recorded, task_id, execution_id or None, text, {
                "activity": last.data.get("activity"),
                "expected_digest": last.data.get("output_digest"), "completed_seq": last.seq,
            }, f"a result that is not the signed completion at entry {last.seq}")
        return count

    def _copied(self, instance: str, key: tuple[str, int, str], text: str,
                seen: str | bytes) -> int:
        """A result with no completion signed in ``instance``: when ``instance`` is a
        rerun (its ``workflow.rerun``) and the task lies before the event it reruns from,
        the engine copied the result from the source, so it is judged against the
        source's signed completions (a ``replay.mismatch`` naming the source when none
        matches); otherwise it is for ``verify --engine`` to judge."""
        _, task_id, execution_id = key
        link = self.recorder.rerun_of(instance)
        if link is None or task_id >= link[1]:
            return 0
        source = link[0]
        theirs = [e for e in self._signed(source, {task_id}, fresh=True)[0].get(task_id, ())
                  if not (execution_id and e.data.get("execution_id"))
                  or e.data.get("execution_id") == execution_id]
        raw = text.encode("utf-8") if text != "" else None
        if any(self._same(source, e, raw) for e in theirs):
            with self._lock:
                self._good[key] = seen
            return 0
        if not theirs:
            return 0  # signed nowhere: verify --engine says so
        last = theirs[-1]
        recorded = self._signed(instance, {task_id}, fresh=True)[1]
        return self._record(instance, recorded, task_id, execution_id or None, text, {
            "activity": last.data.get("activity"), "source": source,
            "expected_digest": last.data.get("output_digest"), "completed_seq": last.seq,
        }, f"a result copied from {source} that is not its signed completion at entry "
           f"{last.seq}")

    def _record_other(self, instance: str, other: list[tuple[int, str, str, str]]) -> int:
        """Record results of another execution than the one scheduled (see the class);
        each once. Returns how many were recorded now."""
        completions, recorded = self._signed(instance, {o[0] for o in other}, fresh=True)
        count = 0
        for task_id, execution, ordered, text in other:
            signed = completions.get(task_id, [])
            theirs = [e for e in signed if e.data.get("execution_id") == execution]
            mine = [e for e in signed if e.data.get("execution_id") == ordered]
            count += self._record(instance, recorded, task_id, execution, text, {
                "activity": next((e.data.get("activity") for e in theirs + mine), None),
                "scheduled_execution_id": ordered,
                "expected_digest": mine[-1].data.get("output_digest") if mine else None,
                "completed_seq": theirs[-1].seq if theirs else None,
            }, f"the result of execution {execution}, not of execution {ordered} the "
               f"history scheduled")
        return count

    def _record(self, instance: str, recorded: set[Any], task_id: int, execution: str | None,
                text: str, about: dict[str, Any], said: str) -> int:
        """Sign one ``replay.mismatch`` (``about`` names what the result was compared
        with) unless the chain holds it already; 1 if signed now, else 0."""
        raw = text.encode("utf-8") if text != "" else None
        seen_digest = None if raw is None else self.recorder.digest(instance, raw)
        if (task_id, seen_digest, execution) in recorded:
            return 0
        recorded.add((task_id, seen_digest, execution))
        seen_ref = self.recorder.commit(instance, text if raw is not None else None)
        self.recorder.append(instance, Kind.REPLAY_MISMATCH, {
            **about, "task_id": task_id, "execution_id": execution,
            "seen_digest": seen_digest, "seen": seen_ref.ref, "worker": worker_id()},
            seen_ref)
        log.warning("histaudit: instance %s, task %s (%s): the engine fed back %s; "
                    "recorded %s", instance, task_id, about.get("activity"), said,
                    Kind.REPLAY_MISMATCH)
        return 1

    def _signed(self, instance: str, task_ids: set[int], *, fresh: bool
                ) -> tuple[dict[int, list[rec.Entry]], set[Any]]:
        """Signed completions of ``task_ids``, and the mismatches already recorded: from
        memory when it holds a completion of each (unless ``fresh``), else read."""

        def init() -> tuple[dict[int, list[rec.Entry]], set[Any]]:
            return {}, set()

        def step(state: tuple[dict[int, list[rec.Entry]], set[Any]],
                 entry: rec.Entry) -> None:
            completions, recorded = state
            if entry.kind == Kind.ACTIVITY_COMPLETED:
                task_id = entry.data.get("task_id")
                if isinstance(task_id, int):
                    completions.setdefault(task_id, []).append(entry)
            elif entry.kind == Kind.REPLAY_MISMATCH:
                recorded.add((entry.data.get("task_id"), entry.data.get("seen_digest"),
                              entry.data.get("execution_id")))

        def known(state: tuple[dict[int, list[rec.Entry]], set[Any]]) -> bool:
            return not fresh and all(t in state[0] for t in task_ids)

        def copy(state: tuple[dict[int, list[rec.Entry]], set[Any]]
                 ) -> tuple[dict[int, list[rec.Entry]], set[Any]]:
            completions, recorded = state
            return ({t: list(completions[t]) for t in task_ids if t in completions},
                    set(recorded))

        return self.recorder.fold(instance, "replay", init, step, copy, known=known)

    def _same(self, instance: str, entry: rec.Entry, raw: bytes | None) -> bool:
        ref = entry.data.get("output")
        if not isinstance(ref, dict):
            return raw is None
        if raw is None:
            return False
        digest = entry.data.get("output_digest")
        if entry.kid == self.recorder.signer.kid and isinstance(digest, str):
            return hmac.compare_digest(self.recorder.digest(instance, raw), digest)
        found, stored = self.recorder.load_payload(ref)
        # Signed under another key and erased: nothing to compare with, so no claim.
        return stored == raw if found else True


def _digest(text: str) -> bytes:
    return sha.single(text.encode("utf-8")).digest()
