"""Wait for a workflow on daprd through the gap between one app worker and the next.

:func:`wait_for_completion` is the workflow client's ``wait_for_workflow_completion`` for
a caller that has just restarted the app's worker (a crash test, a demo): daprd can
refuse the wait for a moment then, with an error that it and the SDK treat as final.
"""

from __future__ import annotations

import time
from typing import Any

import grpc

__all__ = ["wait_for_completion"]

# daprd's answer to a workflow call that reaches it after it dropped the workflow actor
# types (the app's last worker connection closed) but before placement has taken the
# table without them (docs/adr/0008-daprd.md).
_NO_WORKER = "not registered"
_NO_WORKER_RETRY_S = 0.2


def wait_for_completion(client: Any, instance: str, timeout: float) -> Any:
    """``client.wait_for_workflow_completion(instance)`` that outlasts a worker's restart.

    Right after an app's worker dies, placement can still name its daprd as the workflow
    actor's host while daprd's own actor table no longer has the type: daprd then answers
    at once, as a permanent error its router does not retry, ``failed to create actor:
    actor type ... not registered``. That answer is asked again until ``timeout`` (seconds,
    in all) is spent; any other error is raised. Returns the workflow's state, as the
    client does (None if there is none).
    """
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return client.wait_for_workflow_completion(
                instance, timeout_in_seconds=max(1, int(left)))
        except grpc.RpcError as exc:
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            if (_NO_WORKER not in (details or "")
                    or deadline - time.monotonic() <= _NO_WORKER_RETRY_S):
                raise
        time.sleep(_NO_WORKER_RETRY_S)
