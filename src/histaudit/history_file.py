"""The workflow-history file format: one instance's engine events as JSON text.

Written by ``histaudit replay --save`` (a golden file) and, for every generation a
workflow ends with ``continue_as_new``, by the interceptor into the ledger (the engine
keeps only the last generation's history; the ledger keeps each one, signed, so
``histaudit replay`` can replay them all). One object: ``format``, an integer
``version``, the ``instance_id`` and ``workflow`` its ``ExecutionStarted`` event names,
``count``, and ``events``, each a ``HistoryEvent`` as protobuf JSON, one per line for
readable diffs. :func:`loads` refuses anything else with an
:class:`~histaudit.errors.InputError` naming the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from histaudit import sdk
from histaudit.errors import InputError

__all__ = ["FORMAT", "MAX_BYTES", "VERSION", "dumps", "execution_started", "loads"]

FORMAT = "histaudit.workflow-history"
VERSION = 1
MAX_BYTES = 512 << 20


def execution_started(events: Sequence[Any]) -> Any:
    """The ``ExecutionStarted`` event of ``events``; InputError when there is none."""
    for event in events:
        if event.HasField("executionStarted"):
            return event.executionStarted
    raise InputError("history has no ExecutionStarted event: not a workflow history")


def dumps(events: Sequence[Any]) -> str:
    """``events`` (``HistoryEvent`` protobufs) as the text of a history file."""
    from google.protobuf import json_format

    started = execution_started(events) if events else None
    header = {
        "format": FORMAT,
        "version": VERSION,
        "instance_id": started.workflowInstance.instanceId if started else None,
        "workflow": started.name if started else None,
        "count": len(events),
    }
    lines = [orjson.dumps(json_format.MessageToDict(e)).decode() for e in events]
    head = orjson.dumps(header).decode()[:-1]
    return head + ', "events": [\n' + ",\n".join(lines) + "\n]}\n"


def loads(raw: bytes, where: str) -> list[Any]:
    """The events of history text ``raw``; ``where`` names it in errors ("history X: ...")."""
    from google.protobuf import json_format

    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"history {where} is not valid JSON (truncated or garbled?): {exc}"
                         ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"history {where} is not a {FORMAT} file")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise InputError(f"history {where}: unsupported version {version!r} "
                         f"(this histaudit reads version {VERSION})")
    items, count = doc.get("events"), doc.get("count")
    if not isinstance(items, list) or type(count) is not int:
        raise InputError(f"history {where}: 'events' must be a list and 'count' an integer")
    if len(items) != count:
        raise InputError(f"history {where} is truncated or padded: {len(items)} events, "
                         f"header says {count}")
    events = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(f"history {where}: event {i} is not an object")
        event = sdk.protos.HistoryEvent()
        try:
            json_format.ParseDict(item, event)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            # protobuf's message goes on with a line listing every field: the first says it
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise InputError(f"history {where}: event {i} is not a HistoryEvent: {why}"
                             ) from None
        if event.WhichOneof("eventType") is None:
            raise InputError(f"history {where}: event {i} has no event type")
        events.append(event)
    if events:
        started = execution_started(events)
        if doc.get("workflow") != started.name or \
                doc.get("instance_id") != started.workflowInstance.instanceId:
            raise InputError(f"history {where}: header names workflow {doc.get('workflow')!r} "
                             f"of instance {doc.get('instance_id')!r}, the events "
                             f"{started.name!r} of {started.workflowInstance.instanceId!r}")
    return events
