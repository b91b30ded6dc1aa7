"""instance_tree: an instance and the children its signed entries name, depth first.
Cost: under 1 s of CPU."""

from __future__ import annotations

from typing import Any

from histaudit.verify.tree import instance_tree

from .chains import chain


def _chains() -> dict[str, list[Any]]:
    def child(name: str, task: int) -> tuple[str, dict[str, Any]]:
        return ("workflow.scheduled_child", {"child_instance": name, "task_id": task})

    return {
        "root": chain([("workflow.started", {"workflow": "parent", "parent": None}),
                       child("root-a", 1), child("root-b", 2), child("root-a", 1),
                       ("workflow.completed", {})], instance="root"),
        "root-a": chain([("workflow.started", {"workflow": "a",
                                               "parent": {"instance": "root", "task_id": 1}}),
                         child("root", 1),  # names its ancestor: no loop
                         ("workflow.continued_as_new", {}),
                         ("workflow.started", {"workflow": "a"}),
                         ("workflow.terminated", {})], instance="root-a"),
        "root-b": chain([("workflow.started", {"workflow": "b",
                                               "parent": {"instance": "elsewhere"}}),
                         child("root-b-gone", 1)], instance="root-b"),
    }


def test_the_tree_is_depth_first_in_scheduling_order_once_per_instance() -> None:
    chains = _chains()
    nodes = instance_tree("root", lambda i: chains.get(i, []))
    assert [(n.instance, n.depth, n.parent, n.workflow, n.state, n.generations, n.entries)
            for n in nodes] == [
        ("root", 0, None, "parent", "completed", 1, 5),
        ("root-a", 1, "root", "a", "terminated", 2, 5),
        ("root-b", 1, "root", "b", "not-ended", 1, 2),
        ("root-b-gone", 2, "root-b", None, "not-recorded", 1, 0)]
    assert [n.scheduled_seq for n in nodes] == [None, 2, 3, 2]
    assert [n.signed_parent for n in nodes] == [None, "root", "elsewhere", None]
