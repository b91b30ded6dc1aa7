"""Wait for a workflow on daprd through the gap between one app worker and the next.

:func:`wait_for_completion` is the workflow client's ``wait_for_workflow_completion`` for
a caller that has just restarted the app's worker (a crash test, a demo): daprd can
refuse the wait for a moment then, with an error that it and the SDK treat as final.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

T = TypeVar("T")

__all__ = ["wait_for_completion", "when_hosted"]

# daprd's answer to a workflow call that reaches it after it dropped the workflow actor
# types (the app's last worker connection closed) but before placement has taken the
# table without them (docs/adr/0008-daprd.md).
_NO_WORKER = "not registered"
_NOT_HOSTED = "only possible on hosted actor types"
"""daprd's answer to a reminder (a raised event) for a workflow actor type its actor
table does not hold yet: a worker connected a moment ago, placement not yet told."""
_NO_WORKER_RETRY_S = 0.2
_SLICE_S = 10
"""Longest single wait: daprd answers a wait from a stream of the workflow actor's status,
and a wait begun while the worker restarted once stayed unanswered for 300 s (a CI run),
so a wait that times out is asked again, while time is left."""


def when_hosted(call: Callable[[], T], timeout: float) -> T:
    """``call()``, asked again while daprd answers that it does not host the workflow
    actor types yet (:data:`_NO_WORKER`, :data:`_NOT_HOSTED`: the app's worker has just
    connected or restarted), until ``timeout`` seconds are spent; any other error, and
    that one past the timeout, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
            if (_NO_WORKER not in details and _NOT_HOSTED not in details) \
                    or deadline - time.monotonic() <= _NO_WORKER_RETRY_S:
                raise
        time.sleep(_NO_WORKER_RETRY_S)


def wait_for_completion(client: Any, instance: str, timeout: float) -> Any:
    """``client.wait_for_workflow_completion(instance)`` that outlasts a worker's restart.

    Right after an app's worker dies, placement can still name its daprd as the workflow
    actor's host while daprd's own actor table no longer has the type: daprd then answers
    at once, as a permanent error its router does not retry, ``failed to create actor:
    actor type ... not registered``. That answer is asked again until ``timeout`` (seconds,
    in all) is spent; any other error is raised. Each wait lasts at most :data:`_SLICE_S`
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
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            if (_NO_WORKER not in (details or "")
                    or deadline - time.monotonic() <= _NO_WORKER_RETRY_S):
                raise
        time.sleep(_NO_WORKER_RETRY_S)
