"""The recorder: signs events of one app into one ledger with one key.

Payloads (inputs, outputs, error messages) never enter a signed entry. An entry holds a
reference ``{"c": salted commitment, "k": true, "n": size}`` and the payload sits beside
the chain, erasable; ``"k": true`` signs that it is kept (stored in the same transaction),
so a payload row that disappears without a signed ``payload.erased`` is a finding. With
``keep_payloads=False`` nothing is stored and the reference has no ``k``. A random salt
makes equal payloads commit differently, so each reference comes with a ``*_digest``:
HMAC-SHA256 under a per-instance secret derived from the signing key. Equal payloads in
one instance have equal digests (that is how re-executions that returned different
results are found), yet nobody without the private key can test a guess of an erased
value against either the commitment or the digest.

Commitments cover the exact JSON text the SDK exchanges with the engine: activity inputs
are taken off the wire, everything else is encoded with the SDK's own serializer, which
is what the SDK itself sends.

Durability (docs/adr/0004-durability.md): every append goes through one
:class:`~histaudit.ledger.writer.GroupWriter`, so concurrent activities and workflow
turns share commits, and only the kinds in :data:`MUST_BE_DURABLE` wait for stable
storage; the rest ride on the next durable commit.

A recorder can be made before its ledger and key exist (:meth:`AuditRecorder.deferred`)
and bound to them later: a runtime built at import time holds one from the start, hands
it to every wrapper it registers, and opens the ledger and key only in ``start()``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import socket
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from histaudit import sdk
from histaudit.config import DEFAULT_MAX_PAYLOAD_BYTES, ENGINE_GRPC_LIMIT
from histaudit.errors import HistauditError, StoreError, UsageError
from histaudit.ledger import records as rec
from histaudit.ledger import sha
from histaudit.ledger.checkpoint import origin_of
from histaudit.ledger.keys import Signer
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.ledger.writer import GroupWriter

from .late import LateRecords

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "ENGINE_GRPC_LIMIT", "MUST_BE_DURABLE", "AuditRecorder",
           "Payload", "payload_digest", "sdk_decode",
           "sdk_json", "worker_id"]

log = logging.getLogger("histaudit.interceptor")

_DIGEST_DOMAIN = b"histaudit.digest-key.v1\x00"

MUST_BE_DURABLE: frozenset[str] = frozenset({
    Kind.ACTIVITY_COMPLETED,  # its result goes back to the engine right after
    Kind.ACTIVITY_FAILED,     # so does its failure
    Kind.EFFECT_INTENT,       # the side effect (the outside world) comes right after
    # The call was made and paid for, and its answer may leave the process before the
    # activity ends (dapr-agents' call_llm saves it to its state store, and a re-delivered
    # call_llm returns that saved answer without calling again): a crash must not lose it.
    Kind.LLM_CALL,
    # A generation's last record: the engine gets the outcome with the same turn and
    # never replays that generation again, so nothing could append it a second time.
    Kind.WORKFLOW_COMPLETED,
    Kind.WORKFLOW_FAILED,
    Kind.WORKFLOW_CONTINUED_AS_NEW,
    Kind.WORKFLOW_TERMINATED,
})
"""The kinds whose commit must be on stable storage before the append returns: the one
place the durability policy lives. A record is durable before anything that depends on
it leaves the process. Every other record (``activity.started``, effect outcomes,
``replay.mismatch``) is committed without waiting for the disk: it survives a SIGKILL
(the OS holds it) and becomes durable with the next durable commit. The start and
scheduling decisions do not even wait for that commit: they ride with the next append
(:meth:`AuditRecorder.append_decision`). A power loss can lose only such a suffix; a
lost decision is appended again when the workflow replays (:mod:`.workflow`), a lost
start or effect outcome shows as an uncertain re-execution."""


def sdk_json(value: Any) -> str | None:
    """Encode ``value`` exactly as the Dapr SDK does before handing it to the engine.

    ``None`` stays ``None``: the SDK sends no payload at all for it.
    """
    return None if value is None else sdk.to_json(value)


def sdk_decode(raw: bytes) -> Any:
    """Decode stored payload bytes the way the SDK decodes what the engine sends."""
    return sdk.from_json(raw.decode("utf-8"))


def payload_digest(signer: Signer, instance: str, payload: bytes) -> str:
    """Keyed digest of a payload: equal payloads of one instance give equal digests.

    The per-instance secret is SHA-256 over an Ed25519 signature of a fixed label and the
    instance id. Ed25519 signatures are deterministic (RFC 8032), so every process and
    replica holding the key derives the same secret, and nobody else can. The label is
    not JSON, so the signature can never double as a signature over a ledger record, and
    it is hashed, never stored.
    """
    return hmac.digest(_instance_secret(signer, instance), payload, "sha256").hex()


def _instance_secret(signer: Signer, instance: str) -> bytes:
    sig = signer.sign(_DIGEST_DOMAIN + instance.encode("utf-8"))
    return hashlib.sha256(_DIGEST_DOMAIN + sig).digest()


def worker_id() -> str:
    """Who ran it: ``host:pid``, made once per process. The pid is asked on every call
    (a fork reports its own); the host name, a ``uname`` system call, only then."""
    global _worker
    pid, known = os.getpid(), _worker
    if known[0] != pid:
        known = _worker = (pid, f"{socket.gethostname()}:{pid}")
    return known[1]


_worker: tuple[int, str] = (-1, "")
"""(pid, :func:`worker_id`) of the process that made it: one tuple, replaced whole."""


@dataclass(frozen=True, slots=True)
class Payload:
    """One committed payload: the signed reference, its digest and the erasable row."""

    ref: dict[str, Any] | None
    digest: str | None
    rows: dict[bytes, tuple[str, bytes]]


_S = TypeVar("_S")
_R = TypeVar("_R")
_MAX_FOLDS = 4096
"""Instances whose fold states a recorder keeps, least recently used dropped first."""


class _Fold:
    """One fold's state over one instance's chain, the last seq folded into it, and the
    step that folds one more entry (kept to fold this process's own appends)."""

    __slots__ = ("lock", "seq", "state", "step")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.state: Any = None
        self.step: Callable[[Any, rec.Entry], None] | None = None


class _StartCounts(Counter[tuple[str, Any]]):
    """``activity.started`` entries counted by execution id and by task id, and the
    generations the instance ended with ``continue_as_new`` (``("generations", None)``)."""

    def add(self, entry: rec.Entry) -> None:
        if entry.kind == Kind.ACTIVITY_STARTED:
            data = entry.data
            if data.get("execution_id"):
                self["execution_id", data["execution_id"]] += 1
            self["task_id", data.get("task_id")] += 1
        elif entry.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            self["generations", None] += 1


def decision_token(kind: str, data: Mapping[str, Any], generation: str | None
                   ) -> tuple[Any, ...] | None:
    """What identifies one recorded decision across replays (None: nothing does).

    ``generation`` is the engine time the workflow's current generation started at (the
    ``started_at`` of its ``workflow.started``; a ``continue_as_new`` starts a new one,
    whose task ids may repeat the last one's). A scheduled activity is named by the SDK's task
    execution id, which is derived deterministically from the instance, the engine's
    replayed clock and a counter, so it is the same on every replay and differs between
    generations; without one, by task id within the generation.
    """
    if kind == Kind.WORKFLOW_STARTED:
        return ("started", data.get("started_at"))
    if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY:
        if data.get("execution_id"):
            return ("activity", data["execution_id"])
        return ("task", generation, data.get("task_id"))
    if kind == Kind.WORKFLOW_SCHEDULED_CHILD:
        return ("child", generation, data.get("task_id"), data.get("child_instance"))
    if kind == Kind.WORKFLOW_SCHEDULED_TIMER:
        return ("timer", generation, data.get("task_id"))
    if kind == Kind.WORKFLOW_PATCH:
        return ("patch", generation, data.get("patch"))
    if kind == Kind.WORKFLOW_RERUN:
        return ("rerun", data.get("source"), data.get("event_id"))
    if kind == Kind.WORKFLOW_PROPAGATED_HISTORY:
        return ("propagated", generation, data.get("digest"))
    return None


class _Decisions:
    """Tokens (:func:`decision_token`) of the decisions an instance's chain holds."""

    __slots__ = ("generation", "legacy_open", "tokens")

    def __init__(self) -> None:
        self.tokens: set[tuple[Any, ...]] = set()
        self.generation: str | None = None
        self.legacy_open = False
        """The newest ``workflow.started`` has no ``started_at`` (written before it had
        one) and no ``continue_as_new`` followed it: its generation's start counts as
        recorded."""

    def add(self, entry: rec.Entry) -> None:
        if entry.kind == Kind.WORKFLOW_STARTED:
            started = entry.data.get("started_at")
            self.generation = started if isinstance(started, str) else None
            self.legacy_open = self.generation is None
        elif entry.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            self.legacy_open = False
        token = decision_token(entry.kind, entry.data, self.generation)
        if token is not None:
            self.tokens.add(token)

    def has(self, token: tuple[Any, ...]) -> bool:
        return token in self.tokens or (self.legacy_open and token[0] == "started")


_NOT_STARTED = ("histaudit: this recorder has no ledger and key yet: "
                "AuditedWorkflowRuntime.start() opens them, before any workflow or "
                "activity runs")


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a recorder appends with, once bound."""

    ledger: Ledger
    signer: Signer
    writer: GroupWriter
    max_payload: int


class AuditRecorder:
    """Signs events into one ledger with one key; shared by a runtime's threads.

    ``AuditRecorder(ledger, signer)`` is ready at once; :meth:`deferred` makes one that
    :meth:`bind` readies later. Until then ``ledger``, ``signer``, ``writer`` and
    ``max_payload`` (and so every append) raise a one-line :class:`UsageError`.
    """

    def __init__(self, ledger: Ledger, signer: Signer, *, keep_payloads: bool = True,
                 max_payload: int | None = None) -> None:
        self._setup(keep_payloads)
        self.bind(ledger, signer, max_payload=max_payload)

    @classmethod
    def deferred(cls, *, keep_payloads: bool = True) -> AuditRecorder:
        """A recorder without a ledger and key yet (see :meth:`bind`)."""
        recorder = cls.__new__(cls)
        recorder._setup(keep_payloads)
        return recorder

    def _setup(self, keep_payloads: bool) -> None:
        self.late = LateRecords()
        """Workflow ends the ledger could not take when they were made (:mod:`.late`)."""
        self.keep_payloads = keep_payloads
        self._bound: _Bound | None = None
        self._hmac = functools.lru_cache(maxsize=4096)(self._instance_hmac)
        self._folds: OrderedDict[str, dict[str, _Fold]] = OrderedDict()
        self._folds_lock = threading.Lock()
        self._turn = threading.local()

    def note_turn(self, instance: str, past: Sequence[Any], new: Sequence[Any]) -> None:
        """Keep the events of the workflow turn this thread is about to run (the
        runtime's history hook calls it): a ``continue_as_new`` in that turn signs them
        as its generation's history. Held until the thread's next turn, not copied."""
        self._turn.value = (instance, past, new)

    def turn_events(self, instance: str) -> list[Any] | None:
        """The events of this thread's current turn of ``instance`` (None if unknown)."""
        held = getattr(self._turn, "value", None)
        if held is None or held[0] != instance:
            return None
        return [*held[1], *held[2]]

    def bind(self, ledger: Ledger, signer: Signer, *, max_payload: int | None = None) -> None:
        """Append to ``ledger`` with ``signer`` from now on.

        ``max_payload``: the largest output signed as a completion (default
        :data:`~histaudit.config.DEFAULT_MAX_PAYLOAD_BYTES`; the runtime passes
        ``$HISTAUDIT_MAX_PAYLOAD_BYTES``). What was cached for another ledger or key is
        dropped.
        """
        limit = DEFAULT_MAX_PAYLOAD_BYTES if max_payload is None else max_payload
        self._hmac.cache_clear()
        with self._folds_lock:
            self._folds.clear()
        self._bound = _Bound(ledger, signer, GroupWriter(ledger, signer), limit)

    def unbind(self) -> Ledger | None:
        """Stop appending (deferred decisions committed first); return the ledger it was
        bound to (None if unbound), unclosed."""
        bound, self._bound = self._bound, None
        if bound is None:
            return None
        bound.writer.flush()
        return bound.ledger

    @property
    def bound(self) -> bool:
        """Whether it has a ledger and key to append with."""
        return self._bound is not None

    def _binding(self) -> _Bound:
        bound = self._bound
        if bound is None:
            raise UsageError(_NOT_STARTED)
        return bound

    @property
    def ledger(self) -> Ledger:
        return self._binding().ledger

    @property
    def origin(self) -> str:
        """The ledger's checkpoint origin: what a span names its entries' ledger by."""
        return origin_of(self._binding().ledger)

    @property
    def signer(self) -> Signer:
        return self._binding().signer

    @property
    def writer(self) -> GroupWriter:
        """Every append of this recorder: threads share commits (and fsyncs)."""
        return self._binding().writer

    @property
    def max_payload(self) -> int:
        """Activity outputs larger than this (bytes) fail instead of completing."""
        return self._binding().max_payload

    def _instance_hmac(self, instance: str) -> sha.Hmac:
        return sha.Hmac(_instance_secret(self.signer, instance))

    def digest(self, instance: str, payload: bytes) -> str:
        """:func:`payload_digest`, the key's HMAC states kept per instance (one payload at
        a time: see :mod:`histaudit.ledger.sha`)."""
        return self._hmac(instance).hexdigest(payload)

    def commit(self, instance: str, text: str | None) -> Payload:
        """Commit to one JSON text (``None``: no payload, so no reference either)."""
        if text is None:
            return Payload(None, None, {})
        raw = text.encode("utf-8")
        salt = rec.new_salt()
        commitment = rec.commit(raw, salt, sha256=sha.single)
        if not self.keep_payloads:
            return Payload({"c": commitment, "n": len(raw)}, self.digest(instance, raw), {})
        # "k": true signs that the row is stored with the entry (docs/format.md §8.3), so
        # a row deleted without a signed payload.erased is a finding, not an erasure.
        return Payload({"c": commitment, "k": True, "n": len(raw)},
                       self.digest(instance, raw), {salt: (commitment, raw)})

    def append(self, instance: str, kind: str, data: Mapping[str, Any],
               *payloads: Payload) -> rec.Entry:
        """Sign one entry into ``instance``'s chain, storing the payloads it commits to.

        Returns once committed; on stable storage if ``kind`` is in :data:`MUST_BE_DURABLE`.
        """
        rows: dict[bytes, tuple[str, bytes]] = {}
        for p in payloads:
            rows.update(p.rows)
        entry = self.writer.append(instance, kind, data, rows or None,
                                   durable=kind in MUST_BE_DURABLE)
        self._fold_own(entry)
        return entry

    def append_decision(self, instance: str, kind: str, data: Mapping[str, Any],
                        token: tuple[Any, ...], *payloads: Payload) -> None:
        """Sign a workflow decision that a replay appends again when the chain lacks it
        (``token``: :func:`decision_token`), without a commit of its own.

        The entry rides with this process's next append, or is committed within the
        writer's ``linger`` (:meth:`GroupWriter.defer`): a scheduling decision is
        followed at once by the activity it schedules, whose start is an append. Losing
        it to a crash first costs what losing any riding entry to a power cut costs
        (docs/adr/0004-durability.md): the next replay finds it missing and appends it
        again. It counts as held from now on, so a replay in this process does not
        append it twice; a commit that fails forgets it again (logged), so the next
        replay does.
        """
        rows: dict[bytes, tuple[str, bytes]] = {}
        for p in payloads:
            rows.update(p.rows)
        self.noted_decision(instance, token)

        def settled(entry: rec.Entry | None, error: BaseException | None) -> None:
            if entry is not None:
                self._fold_own(entry)
                return
            self._forget_decision(instance, token)
            log.warning("histaudit: could not record %s for workflow %s (the next replay "
                        "records it): %s", kind, instance, error)

        self.writer.defer(instance, kind, data, rows or None, settled=settled)

    def _fold_own(self, entry: rec.Entry) -> None:
        """Fold an entry this process just appended into the instance's fold states that
        end right before it. The chain's seqs are consecutive, so a state at seq − 1 is
        then exactly the chain up to the entry — with no read. A state further behind
        (another process or thread appended in between) is left for the next read."""
        with self._folds_lock:
            slots = self._folds.get(entry.instance)
            folds = list(slots.values()) if slots else []
        for slot in folds:
            with slot.lock:
                if slot.step is not None and slot.state is not None \
                        and slot.seq == entry.seq - 1:
                    slot.step(slot.state, entry)
                    slot.seq = entry.seq

    def entries(self, instance: str) -> Iterator[rec.Entry]:
        """``instance``'s parsed entries in chain order, skipping any that do not parse.

        Used only to count and look up; the verifier is what reports a malformed entry.
        """
        rows = self.ledger.ride_out(lambda: list(self.ledger.entries(instance)))
        for row in rows:
            try:
                yield rec.parse_entry(row.body)
            except HistauditError:
                continue

    def fold(self, instance: str, name: str, init: Callable[[], _S],
             step: Callable[[_S, rec.Entry], None], answer: Callable[[_S], _R], *,
             known: Callable[[_S], bool] | None = None) -> _R:
        """Fold ``step`` over ``instance``'s parsed entries; return ``answer(state)``.

        Reading the whole chain for every activity makes a long workflow quadratic. A
        chain only grows at its end, and appends are serialized, so what this process
        has read of it stays a prefix: the state of each fold (``name``) is kept per
        instance and brought up to date by reading only the entries after the last seq
        it has seen — entries any process appended since included. Entries this process
        appends are folded in as they are appended (:meth:`_fold_own`). ``known(state)``
        True answers from memory without reading: for a question whose answer, once in
        the state, later entries cannot change. A new process (after a crash) starts
        from the first entry, as before. ``answer`` runs under the fold's lock, so it may
        read the state but must return something that does not share it. States are kept
        for the most recently used instances only.
        """
        slot = self._slot(instance, name)
        with slot.lock:
            if slot.state is None:
                slot.state = init()
            slot.step = step
            if known is not None and known(slot.state):
                return answer(slot.state)
            state = slot.state

            def catch_up() -> None:
                # made again after a dropped connection: from the last row it folded
                for row in self.ledger.follow(instance, slot.seq):
                    slot.seq = max(slot.seq, row.seq)
                    try:
                        entry = rec.parse_entry(row.body)
                    except HistauditError:
                        continue  # counted nowhere; the verifier reports it
                    step(state, entry)

            self.ledger.ride_out(catch_up)
            return answer(state)

    def _slot(self, instance: str, name: str) -> _Fold:
        with self._folds_lock:
            slots = self._folds.get(instance)
            if slots is None:
                slots = self._folds[instance] = {}
            self._folds.move_to_end(instance)
            while len(self._folds) > _MAX_FOLDS:
                self._folds.popitem(last=False)
            slot = slots.get(name)
            if slot is None:
                slot = slots[name] = _Fold()
        return slot

    def has_decision(self, instance: str, token: tuple[Any, ...]) -> bool:
        """Whether ``instance``'s chain holds the decision ``token`` names (see
        :func:`decision_token`).

        Answered from memory when this process appended or already read it, so a
        workflow's replays of its own decisions cost no read; otherwise by the
        incremental ``fold`` (only the entries after the last seq it has seen).
        """
        def holds(known: _Decisions) -> bool:
            return known.has(token)

        return bool(self.fold(instance, "decisions", _Decisions, _Decisions.add, holds,
                              known=holds))

    def knows_decision(self, instance: str, token: tuple[Any, ...]) -> bool:
        """Whether memory alone says ``instance``'s chain holds ``token``'s decision.

        No lock and no read: the replayed path of a workflow asks this once per earlier
        step on every turn. Tokens are only ever added (a chain only grows), so a token
        found is a true answer; False means "ask :meth:`has_decision`". It leaves the
        instance's place among the most recently used as it is: every turn also asks
        :meth:`has_decision` (for its start), which refreshes it.
        """
        slots = self._folds.get(instance)
        slot = slots.get("decisions") if slots is not None else None
        state = slot.state if slot is not None else None
        return isinstance(state, _Decisions) and token in state.tokens

    def noted_decision(self, instance: str, token: tuple[Any, ...]) -> None:
        """Remember that ``token``'s decision was just appended to ``instance``'s chain.

        Its entry is read again by the next fold; adding a token twice changes nothing.
        """
        slot = self._slot(instance, "decisions")
        with slot.lock:
            if slot.state is None:
                slot.state = _Decisions()
            slot.state.tokens.add(token)

    def _forget_decision(self, instance: str, token: tuple[Any, ...]) -> None:
        """Undo :meth:`noted_decision` for a decision whose deferred commit failed."""
        slot = self._slot(instance, "decisions")
        with slot.lock:
            if slot.state is not None:
                slot.state.tokens.discard(token)

    def rerun_of(self, instance: str) -> tuple[str, int] | None:
        """(source, event id) when ``instance`` is a rerun (its chain's
        ``workflow.rerun``), from the incremental fold: answered from memory once found."""
        def init() -> list[tuple[str, int] | None]:
            return [None]

        def step(state: list[tuple[str, int] | None], entry: rec.Entry) -> None:
            source, event = entry.data.get("source"), entry.data.get("event_id")
            if entry.kind == Kind.WORKFLOW_RERUN and state[0] is None \
                    and isinstance(source, str) and isinstance(event, int):
                state[0] = (source, event)

        def found(state: list[tuple[str, int] | None]) -> tuple[str, int] | None:
            return state[0]

        return self.fold(instance, "rerun", init, step, found,
                         known=lambda state: state[0] is not None)

    def prior_starts(self, instance: str, execution_id: str, task_id: int) -> int:
        """How many times this activity call already started, according to the ledger.

        A call is identified by the SDK's task execution id, which stays the same across
        retry-policy retries (each gets a new task id) and engine re-deliveries (same task
        id); an SDK that sends none falls back to the task id.
        """
        return self.start_counts(instance, execution_id, task_id)[0]

    def start_counts(self, instance: str, execution_id: str, task_id: int) -> tuple[int, int]:
        """:meth:`prior_starts`, and the generation the instance is in (0 until its first
        ``workflow.continued_as_new``, which is signed before the next generation
        schedules anything), from one fold."""
        by = ("execution_id", execution_id) if execution_id else ("task_id", task_id)
        return self.fold(instance, "starts", _StartCounts, _StartCounts.add,
                         lambda counts: (int(counts[by]), int(counts["generations", None])))

    def load_payload(self, ref: Mapping[str, Any]) -> tuple[bool, bytes | None]:
        """The stored bytes behind a reference: (True, bytes), or (False, None) once erased.

        A stored payload that does not match its signed commitment is refused.
        """
        commitment = ref.get("c")
        if not isinstance(commitment, str):
            return False, None
        stored = self.ledger.ride_out(lambda: self.ledger.payload(commitment))
        if stored is None:
            return False, None
        salt, raw = stored
        if not rec.commitment_matches(commitment, raw, salt):
            raise StoreError(f"stored payload {commitment[:12]}… does not match its signed "
                             f"commitment")
        return True, raw
