"""How the workflow ended, when not a success (issue 48, item 7).

The interceptor signs a workflow's end as ``workflow.completed``, ``workflow.failed``
(``error_type`` in clear, the message committed: :mod:`histaudit.interceptor.workflow`) or
``workflow.continued_as_new``, and a client's terminate as ``workflow.terminated`` when a
turn carries it (:mod:`histaudit.interceptor.received`). Only the last end counts, and only
while no later ``workflow.started`` opened a new run (a continue-as-new's next generation,
a re-run): it is what the instance's ledger says of how it ended. That is one small tuple
per instance, whatever its length.

* the last end is ``workflow.failed`` — ``workflow-failed`` (warning), with the error type
  and the failure's message when the verifier holds the payloads (the stored message must
  match its signed commitment to be quoted);
* it is ``workflow.terminated`` — ``workflow-terminated`` (info): the instance ended there,
  by a client's terminate; it is not unfinished and not an error.
"""

from __future__ import annotations

from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import commitment_matches

from .findings import Finding
from .payloads import PayloadLookup

__all__ = ["MESSAGE_CHARS", "WorkflowEnd"]

MESSAGE_CHARS = 300
"""A failure's message is quoted up to this many characters (its whitespace collapsed)."""


class WorkflowEnd:
    """The last end of one instance's chain; ``payloads`` (commitment -> (salt, bytes))
    lets a failure's finding quote its message."""

    def __init__(self, instance: str, payloads: PayloadLookup | None = None) -> None:
        self.instance, self.payloads = instance, payloads
        self.last: tuple[int, str, Any] | None = None  # (seq, kind, data)

    def ended(self, seq: int, kind: str, kid: str, data: Any) -> None:
        self.last = (seq, kind, data)

    def started(self) -> None:
        """A ``workflow.started``: a new run, not ended (yet)."""
        self.last = None

    def findings(self) -> list[Finding]:
        if self.last is None:
            return []
        seq, kind, data = self.last
        if kind == Kind.WORKFLOW_FAILED:
            error_type = data.get("error_type")
            what = "an error of no signed type" if error_type is None else str(error_type)
            return [Finding.make(
                "workflow-failed", self.instance, seq,
                f"the workflow failed (workflow.failed at entry {seq}): {what}"
                f"{self._message(data.get('error'))}")]
        if kind == Kind.WORKFLOW_TERMINATED:
            received = data.get("received_at")
            when = "" if received is None else f", received {received}"
            return [Finding.make(
                "workflow-terminated", self.instance, seq,
                f"the workflow was terminated (workflow.terminated at entry {seq}{when}): "
                f"a client ended it there")]
        return []

    def _message(self, ref: Any) -> str:
        """``: the message`` as stored, or what stands in for it."""
        if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
            return ""  # no message committed
        if self.payloads is None:
            return "; its message is a committed payload this verification did not read"
        stored = self.payloads(ref["c"])
        if stored is None:
            return "; its message is not stored (erased, or never kept)"
        salt, raw = stored
        if not commitment_matches(ref["c"], raw, salt):
            return "; its stored message does not match what was signed"
        text = " ".join(raw.decode("utf-8", "replace").split())
        if len(text) > MESSAGE_CHARS:
            text = f"{text[:MESSAGE_CHARS]}… ({len(text)} chars)"
        return f": {text}" if text else ", with an empty message"
