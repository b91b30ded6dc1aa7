"""signed_tree_extends: a newer signed tree against a kept checkpoint, from its leaves."""

from __future__ import annotations

import pytest

from histaudit.ledger import merkle
from histaudit.ledger.checkpoint import Checkpoint
from histaudit.verify.consistency import signed_tree_extends

ORIGIN = "histaudit/00000000-0000-4000-8000-000000000000"


def tree_of(*data: bytes, origin: str = ORIGIN) -> tuple[Checkpoint, dict[int, bytes]]:
    hashes = [merkle.leaf_hash(d) for d in data]
    size, root = merkle.root_of(hashes)
    return (Checkpoint(origin=origin, size=size, root=root, note=b"", kid="k"),
            dict(enumerate(hashes)))


def codes(old: Checkpoint, new: Checkpoint, leaves: dict[int, bytes]) -> list[str]:
    return [f.code for f in signed_tree_extends(old, new, leaves).findings]


def test_appends_extend_and_equal_trees_extend() -> None:
    old, _ = tree_of(b"a", b"b", b"c")
    new, leaves = tree_of(b"a", b"b", b"c", b"d", b"e")
    result = signed_tree_extends(old, new, leaves)
    assert result.ok and (result.old_size, result.size) == (3, 5)
    assert result.report().mode == "consistency 3->5"
    assert codes(new, new, leaves) == []
    empty, _ = tree_of()
    assert codes(empty, new, {}) == []  # every tree extends the empty one


def test_only_the_first_old_size_leaves_are_needed() -> None:
    old, _ = tree_of(b"a", b"b")
    new, leaves = tree_of(b"a", b"b", b"c", b"d")
    assert codes(old, new, {0: leaves[0], 1: leaves[1]}) == []
    with pytest.raises(ValueError, match="1 of the first 2 leaves"):
        signed_tree_extends(old, new, {0: leaves[0], 3: leaves[3]})


def test_rollback_needs_no_leaves_and_a_fork_is_inconsistent() -> None:
    old, _ = tree_of(b"a", b"b", b"c", b"d")
    shorter, _ = tree_of(b"a", b"b")
    assert codes(old, shorter, {}) == ["checkpoint-rollback"]
    forked, leaves = tree_of(b"a", b"b", b"x", b"d", b"e")
    assert codes(old, forked, leaves) == ["checkpoint-inconsistent"]


def test_another_origin_is_named_first_and_the_content_still_decides() -> None:
    old, _ = tree_of(b"a", origin="histaudit/other")
    new, leaves = tree_of(b"a", b"b")
    assert codes(old, new, leaves) == ["ledger-id-mismatch"]
    old, _ = tree_of(b"z", origin="histaudit/other")
    assert codes(old, new, leaves) == ["ledger-id-mismatch", "checkpoint-inconsistent"]
