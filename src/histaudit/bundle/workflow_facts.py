"""What an instance's entries say of its workflow, for the report: its name, how it ended,
its parent and generations (:class:`WorkflowFacts`), and each event that reached it from
outside its code, or that it started, in words (:func:`event_words`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from histaudit.ledger.kinds import Kind
from histaudit.ledger.timeline import TimelineEntry
from histaudit.verify.tree import WorkflowSummary

__all__ = ["RECEIVED_KINDS", "STATE_WORDS", "WorkflowFacts", "event_words"]

STATE_WORDS = {"completed": "<span class=ok>completed</span>",
               "failed": "<span class=bad>failed</span>",
               "terminated": "<span class=bad>terminated</span>"}
"""How the report shows an instance's end state (others: the state's own word)."""
RECEIVED_KINDS = (Kind.WORKFLOW_EVENT_RECEIVED, Kind.WORKFLOW_TIMER_FIRED,
                  Kind.WORKFLOW_SUSPENDED, Kind.WORKFLOW_RESUMED, Kind.WORKFLOW_TERMINATED,
                  Kind.WORKFLOW_CUSTOM_STATUS, Kind.WORKFLOW_CONTINUED_AS_NEW,
                  Kind.WORKFLOW_SCHEDULED_CHILD, Kind.WORKFLOW_SCHEDULED_TIMER,
                  Kind.WORKFLOW_PATCH, Kind.WORKFLOW_RERUN)
"""The entries the report's "Workflow events" table lists."""


@dataclass
class WorkflowFacts:
    """What an instance's entries say of its workflow: name, how it ended, its parent,
    its generations, and what reached it from outside or it started (children)."""

    workflow: str | None = None
    state: str = "not-ended"
    parent: str | None = None
    generations: int = 1
    events: list[TimelineEntry] = field(default_factory=list)

    @classmethod
    def of(cls, rows: Iterable[TimelineEntry]) -> WorkflowFacts:
        summary = WorkflowSummary()  # the tree's own fold (verify --tree)
        events = []
        for e in rows:
            if e.kind is None:
                continue
            summary.add(e.seq, e.kind, e.data)
            if e.kind in RECEIVED_KINDS:
                events.append(e)
        return cls(summary.workflow, summary.state, summary.signed_parent,
                   summary.generations, events)

    def summary(self, parent_href: str | None = None) -> str:
        """``name``, how it ended, its generations and parent (linked to
        ``parent_href`` when given), as one HTML phrase."""
        text = (f"<b>{escape(self.workflow)}</b> " if self.workflow else "") + \
            STATE_WORDS.get(self.state, escape(self.state))
        if self.generations > 1:
            text += f", {self.generations} generations (continue-as-new)"
        if self.parent is not None:
            parent = (f"<a href='{escape(parent_href)}'>{escape(self.parent)}</a>"
                      if parent_href else escape(self.parent))
            text += f", child of {parent}"
        return text


def event_words(e: TimelineEntry) -> str:
    d = e.data
    if e.kind == Kind.WORKFLOW_EVENT_RECEIVED:
        return f"event {d.get('name')!r} received at {d.get('received_at')}"
    if e.kind == Kind.WORKFLOW_SCHEDULED_TIMER:
        return f"timer {d.get('task_id')} created, due {d.get('fire_at')}"
    if e.kind == Kind.WORKFLOW_TIMER_FIRED:
        return f"timer {d.get('timer_id')} (due {d.get('fire_at')}) fired"
    if e.kind == Kind.WORKFLOW_TERMINATED:
        return (f"terminated by a client at {d.get('received_at')}"
                + (" (with its children)" if d.get("recurse") else ""))
    if e.kind in (Kind.WORKFLOW_SUSPENDED, Kind.WORKFLOW_RESUMED):
        return f"{str(e.kind).split('.')[1]} by a client at {d.get('received_at')}"
    if e.kind == Kind.WORKFLOW_CUSTOM_STATUS:
        return "custom status set (value committed)"
    if e.kind == Kind.WORKFLOW_RERUN:
        return (f"rerun of {d.get('source')!r} from its event {d.get('event_id')} (the "
                f"results before it copied from the source, signed there up to entry "
                f"{(d.get('source_head') or {}).get('seq')})")
    if e.kind == Kind.WORKFLOW_PATCH:
        version = f" (version {d.get('version')!r})" if d.get("version") else ""
        return (f"patch {d.get('patch')!r} {'taken' if d.get('taken') else 'not taken'}"
                f"{version}")
    if e.kind == Kind.WORKFLOW_SCHEDULED_CHILD:
        return f"started child {d.get('child_workflow')!r} as {d.get('child_instance')}"
    return "continued as new (next input committed; this generation's history signed)"
