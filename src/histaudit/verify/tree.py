"""An instance's tree: the instance, the child workflows it scheduled, theirs, and so on.

Read from what the ledger signed — each ``workflow.scheduled_child`` names its child's
instance id — so ``histaudit verify ID --tree`` covers a parent, its children and every
generation of each (generations share their instance's chain). A child the ledger holds no
chain for is still a node (``not-recorded``): verifying it gives ``instance-missing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from histaudit.errors import FormatError
from histaudit.ledger.kinds import AFTERWORD_KINDS, WORKFLOW_STATE, Kind
from histaudit.ledger.records import StoredEntry, parse_entry

__all__ = ["MAX_TREE", "TreeNode", "WorkflowSummary", "instance_tree"]

MAX_TREE = 10_000
"""Most instances one tree walks (a child that names its ancestor cannot loop it)."""


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One instance of a tree, in depth-first order."""

    instance: str
    depth: int
    """0 for the root."""
    parent: str | None
    scheduled_seq: int | None
    """The parent's ``workflow.scheduled_child`` entry that named this instance."""
    workflow: str | None
    """The workflow name its ``workflow.started`` signed (None without one)."""
    state: str
    """What its last signed entry says (``list``'s ``workflow`` column), or
    ``not-recorded`` when the ledger holds no entry of it."""
    generations: int
    """1 plus its ``workflow.continued_as_new`` entries."""
    entries: int
    signed_parent: str | None = None
    """The parent its own ``workflow.started`` signed (the link from the child's side;
    None for a top-level workflow, or a ledger written before histaudit signed it)."""
    rerun_of: tuple[str, int] | None = None
    """(source instance, event id) when it is a rerun of another instance from one of
    its events (its ``workflow.rerun``)."""

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "depth": self.depth, "parent": self.parent,
                "scheduled_seq": self.scheduled_seq, "workflow": self.workflow,
                "state": self.state, "generations": self.generations,
                "entries": self.entries, "signed_parent": self.signed_parent,
                "rerun_of": None if self.rerun_of is None else {
                    "instance": self.rerun_of[0], "event_id": self.rerun_of[1]}}


def instance_tree(root: str, entries_of: Callable[[str], Iterable[StoredEntry]]
                  ) -> list[TreeNode]:
    """The tree below ``root``, depth first, children in the order they were scheduled.
    ``entries_of(instance)`` gives an instance's stored rows (``Ledger.entries``); rows
    that do not parse are skipped (``verify`` reports them)."""
    nodes: list[TreeNode] = []
    seen = {root}
    todo: list[tuple[str, int, str | None, int | None]] = [(root, 0, None, None)]
    while todo and len(nodes) < MAX_TREE:
        instance, depth, parent, seq = todo.pop()
        node, children = _node(instance, depth, parent, seq, entries_of(instance))
        nodes.append(node)
        fresh = [(c, s) for c, s in children if c not in seen]
        seen.update(c for c, _ in fresh)
        todo.extend((c, depth + 1, instance, s) for c, s in reversed(fresh))
    return nodes


@dataclass
class WorkflowSummary:
    """What one instance's entries say of its workflow, folded entry by entry (:meth:`add`,
    in chain order): its name and signed parent (its first ``workflow.started``), its
    generations, the children it scheduled and, from its last entry, its state. Shared by
    the tree and the bundle report."""

    workflow: str | None = None
    signed_parent: str | None = None
    generations: int = 1
    children: dict[str, int] = field(default_factory=dict)
    """Child instance -> the seq of the ``workflow.scheduled_child`` that first named it."""
    last_kind: str | None = None
    rerun_of: tuple[str, int] | None = None
    """(source, event id) of its ``workflow.rerun``: a rerun of another instance."""

    def add(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        if kind not in AFTERWORD_KINDS:  # an erasure after the end leaves it ended
            self.last_kind = kind
        if kind == Kind.WORKFLOW_RERUN and self.rerun_of is None:
            source, event = data.get("source"), data.get("event_id")
            if isinstance(source, str) and isinstance(event, int):
                self.rerun_of = (source, event)
            return
        if kind == Kind.WORKFLOW_STARTED and self.workflow is None:
            name, link = data.get("workflow"), data.get("parent")
            self.workflow = name if isinstance(name, str) else None
            if isinstance(link, Mapping) and isinstance(link.get("instance"), str):
                self.signed_parent = link["instance"]
        elif kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            self.generations += 1
        elif kind == Kind.WORKFLOW_SCHEDULED_CHILD:
            child = data.get("child_instance")
            if isinstance(child, str) and child:
                self.children.setdefault(child, seq)

    @property
    def state(self) -> str:
        """``list``'s ``workflow`` column for its last entry (``not-ended`` without one)."""
        return WORKFLOW_STATE.get(self.last_kind, "not-ended") if self.last_kind \
            else "not-ended"


def _node(instance: str, depth: int, parent: str | None, seq: int | None,
          rows: Iterable[StoredEntry]) -> tuple[TreeNode, list[tuple[str, int]]]:
    summary = WorkflowSummary()
    count = 0
    for row in rows:
        count += 1
        try:
            entry = parse_entry(row.body)
        except FormatError:
            continue
        summary.add(entry.seq, entry.kind, entry.data)
    state = "not-recorded" if count == 0 else summary.state
    return (TreeNode(instance, depth, parent, seq, summary.workflow, state,
                     summary.generations, count, summary.signed_parent, summary.rerun_of),
            list(summary.children.items()))
