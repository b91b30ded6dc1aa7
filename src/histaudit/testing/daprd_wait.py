"""Wait for a workflow on daprd through the gap between one app worker and the next.

:func:`wait_for_completion` is the workflow client's ``wait_for_workflow_completion`` for
a caller that has just restarted the app's worker (a crash test, a demo): daprd can
refuse the wait for a moment then, with an error that it and the SDK treat as final.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

T = TypeVar("T")

__all__ = ["stranded", "wait_for_completion", "when_hosted"]

# daprd's answer to a workflow call that reaches it after it dropped the workflow actor
# types (the app's last worker connection closed) but before placement has taken the
# table without them (docs/adr/0008-daprd.md).
_NO_WORKER = "not registered"
_NOT_HOSTED = "only possible on hosted actor types"
"""daprd's answer to a reminder (a raised event) for a workflow actor type its actor
table does not hold yet: a worker connected a moment ago, placement not yet told."""
_NO_HOST = "did not find address for actor"
"""daprd's answer to a call for a workflow actor while no app worker is connected at all
(the worker crashed, its successor has not connected yet): placement knows no host."""
_NO_WORKER_RETRY_S = 0.2
_SLICE_S = 10
"""Longest single wait: daprd answers a wait from a stream of the workflow actor's status,
and a wait begun while the worker restarted once stayed unanswered for 300 s (a CI run),
so a wait that times out is asked again, while time is left."""


def _between_workers(exc: grpc.RpcError) -> bool:
    """True when ``exc`` is an engine's answer while it or the app's worker restarts."""
    if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNAVAILABLE:
        return True  # the engine itself is down (killed, not restarted yet)
    details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
    return any(m in details for m in (_NO_WORKER, _NOT_HOSTED, _NO_HOST))


def when_hosted(call: Callable[[], T], timeout: float,
                stop: threading.Event | None = None) -> T:
    """``call()``, asked again while the engine answers that no app worker hosts the
    workflow yet or that it is down itself (:func:`_between_workers`: a worker or the
    engine has just crashed or restarted), until ``timeout`` seconds are spent or ``stop``
    is set; any other error, and that one past the timeout, is raised.

    Only for a call that may be repeated: an answer of UNAVAILABLE can come after the
    engine took the call, so ``call()`` may then take effect twice.
    """
    deadline = time.monotonic() + timeout
    stop = stop if stop is not None else threading.Event()
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if not _between_workers(exc) or stop.is_set() \
                    or deadline - time.monotonic() <= _NO_WORKER_RETRY_S:
                raise
        stop.wait(_NO_WORKER_RETRY_S)


def wait_for_completion(client: Any, instance: str, timeout: float) -> Any:
    """``client.wait_for_workflow_completion(instance)`` that outlasts a worker's restart.

    Right after an app's worker dies, placement can still name its daprd as the workflow
    actor's host while daprd's own actor table no longer has the type: daprd then answers
    at once, as a permanent error its router does not retry, ``failed to create actor:
    actor type ... not registered``. That answer, and the others :func:`_between_workers`
    names, are asked again until ``timeout`` (seconds, in all) is spent; any other error is
    raised. Each wait lasts at most :data:`_SLICE_S`
    seconds and is asked again when it times out, until ``timeout`` is spent (then the
    client's ``TimeoutError`` is raised). Returns the workflow's state, as the client does
    (None if there is none).
    """
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return client.wait_for_workflow_completion(
                instance, timeout_in_seconds=max(1, int(min(left, _SLICE_S))))
        except TimeoutError:
            if deadline - time.monotonic() <= 0:
                raise
            continue
        except grpc.RpcError as exc:
            if not _between_workers(exc) or deadline - time.monotonic() <= _NO_WORKER_RETRY_S:
                raise
        time.sleep(_NO_WORKER_RETRY_S)


_STRAND_ERRORS = 10
"""Refusals that mark a stranded daprd: a reminder is retried once a second, so ten
refusals with no placement change between them is ten seconds of a connected worker's
types missing, where the gap between two workers lasts well under one."""


def stranded(log: str) -> bool:
    """Whether daprd's log (its tail) shows the dapr 1.18.3 deadlock of ADR 0008: an app
    worker connected after the last one's stream closed, and since then daprd has refused
    its own workflow reminders :data:`_STRAND_ERRORS` times for want of the actor types,
    without one placement dissemination that would bring them back.

    The deadlock: the old stream's disconnect unregisters the workflow actor types, which
    halts every workflow actor; one of them is inside a reminder, waiting for its work
    item to be run by a worker, and holds its lock; the new worker's stream cannot take
    that work item until its connect callback registers the types, which waits for the
    unregistering to end. Only a daprd restart ends it.
    """
    closed = log.rfind("work item stream closed")
    opened = log.rfind("work item stream established")
    if closed < 0 or opened < closed:
        return False
    since = log[opened:]
    since = since[since.rfind("Dissemination complete") + 1:]  # all of it when none
    return since.count(_NO_WORKER) >= _STRAND_ERRORS
