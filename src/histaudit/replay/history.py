"""A workflow's recorded history as a value: load, save and fetch it.

A :class:`History` is the engine's ``HistoryEvent`` list of one instance, frozen, with
the workflow name and instance id its ``ExecutionStarted`` event names — what temporalio
calls ``WorkflowHistory``. It comes from the engine (:meth:`History.fetch`: the sidecar's
``GetInstanceHistory``) or from a golden file (:meth:`History.load`, :meth:`History.save`:
JSON with a format name, an integer ``version`` and every event as protobuf JSON, one per
line for readable diffs). A history that cannot be used — a file that is truncated,
garbled or of an unknown version, an engine that does not answer — is an
:class:`~histaudit.errors.InputError` (or :class:`~histaudit.errors.EngineError`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from histaudit import history_file, sdk
from histaudit.errors import EngineError, InputError, UsageError
from histaudit.history_file import execution_started
from histaudit.inputs import read_limited
from histaudit.services import service_words

__all__ = ["DEFAULT_TIMEOUT_S", "HISTORY_FORMAT", "HISTORY_VERSION", "History",
           "engine_instance_ids", "execution_started", "history_files", "rerun_from_event"]

HISTORY_FORMAT = history_file.FORMAT
HISTORY_VERSION = history_file.VERSION
MAX_HISTORY_BYTES = history_file.MAX_BYTES
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class History:
    """One instance's recorded history. Iterating it yields its events."""

    events: tuple[Any, ...]

    @classmethod
    def of(cls, events: Iterable[Any]) -> History:
        return cls(tuple(events))

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.events)

    @property
    def workflow(self) -> str | None:
        """The workflow's name, as its ExecutionStarted event records it."""
        return execution_started(self.events).name if self.events else None

    @property
    def instance_id(self) -> str | None:
        return (execution_started(self.events).workflowInstance.instanceId
                if self.events else None)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> History:
        """Read and validate a golden history file; InputError on anything unexpected."""
        return cls(tuple(_load(Path(path))))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this history as a golden file (atomically); return its path."""
        return _save(self.events, Path(path))

    @classmethod
    def fetch(cls, address: str, instance_id: str, *,
              timeout: float = DEFAULT_TIMEOUT_S) -> History:
        """The engine's history of ``instance_id`` (``GetInstanceHistory``).

        EngineError when the engine does not answer within ``timeout`` seconds;
        InputError when it has no such instance.
        """
        return cls(tuple(_fetch(address, instance_id, timeout)))

def _save(events: Sequence[Any], out: Path) -> Path:
    text = history_file.dumps(list(events))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise InputError(f"cannot write history {out}: {exc.strerror or exc}") from None
    return out


def engine_instance_ids(address: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Every instance id the engine knows (``ListInstanceIDs``, page by page)."""
    ids: list[str] = []
    token: str | None = None
    with _channel(address, timeout) as stub:
        while True:
            request = sdk.protos.ListInstanceIDsRequest(continuationToken=token)
            response = _call(address, "ListInstanceIDs", lambda r=request: stub.ListInstanceIDs(
                r, timeout=timeout), timeout)
            ids.extend(response.instanceIds)
            token = (response.continuationToken
                     if response.HasField("continuationToken") else None)
            if not token:
                return ids


def rerun_from_event(address: str, instance_id: str, event_id: int, *,
                     new_instance_id: str | None = None,
                     timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Rerun ``instance_id`` from its history event ``event_id`` as a new instance
    (``RerunWorkflowFromEvent``: what dapr 1.19's ``rerun_workflow_from_event`` calls,
    reached here on either SDK layout); returns the new instance's id. The source keeps
    its input and so does the rerun. EngineError when the engine refuses (the
    standalone durabletask-go answers UNIMPLEMENTED; daprd refuses a source that has not
    ended, a child, an event that is not a scheduling)."""
    with _channel(address, timeout) as stub:
        request = sdk.protos.RerunWorkflowFromEventRequest(
            sourceInstanceID=instance_id, eventID=event_id,
            newInstanceID=new_instance_id or "")
        response = _call(address, "RerunWorkflowFromEvent",
                         lambda: stub.RerunWorkflowFromEvent(request, timeout=timeout),
                         timeout, instance_id)
    return str(response.newInstanceID)


def history_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The saved histories of ``directory``: its ``*.json`` files, by name."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"history directory {d}: not a directory")
    files = sorted(p for p in d.glob("*.json") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise InputError(f"history directory {d} has no *.json history files")
    return files


def _load(p: Path) -> list[Any]:
    return history_file.loads(read_limited(p, "history", MAX_HISTORY_BYTES), str(p))


@contextlib.contextmanager
def _channel(address: str, timeout: float) -> Iterator[Any]:
    """The engine's TaskHubSidecarService stub, once its channel is ready."""
    import grpc

    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--engine {address!r}: expected HOST:PORT")
    channel = sdk.get_grpc_channel(address, options=[
        ("grpc.max_receive_message_length", -1)])
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise EngineError(f"engine at {address} did not answer within "
                              f"{timeout:g}s") from None
        yield sdk.history_stub(channel)
    finally:
        channel.close()


def _call(address: str, what: str, call: Any, timeout: float,
          instance_id: str | None = None) -> Any:
    import grpc

    try:
        return call()
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.NOT_FOUND and instance_id is not None:
            raise InputError(f"engine at {address} has no instance {instance_id!r}") from None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise EngineError(f"engine at {address} did not answer within "
                              f"{timeout:g}s") from None
        # the engine's words, on one line, with nothing shaped like a token in them
        raise EngineError(f"engine at {address}: {what} failed: "
                          f"{code.name if code else 'error'}: "
                          f"{service_words(str(detail))}") from None


def _fetch(address: str, instance_id: str, timeout: float) -> list[Any]:
    with _channel(address, timeout) as stub:
        request = sdk.protos.GetInstanceHistoryRequest(instanceId=instance_id)
        response = _call(address, "GetInstanceHistory",
                         lambda: stub.GetInstanceHistory(request, timeout=timeout), timeout,
                         instance_id)
    events = list(response.events)
    if not events:
        raise InputError(f"engine at {address} has no instance {instance_id!r} (no history)")
    return events
