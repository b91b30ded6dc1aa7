"""histaudit.verify.behaviour: the same findings in memory, spilled to disk, and as the
original analyzer made them.

Every chain here goes through three analyzers: the original (``original_behaviour``, a
copy of the code before events could leave memory), the new one with everything in
memory, and the new one forced to spill after one, two or three events per list. Their
``finish()`` lists must be equal — same findings, same messages, same order — or all
three must raise the same error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.ledger.records import Entry
from histaudit.verify import behaviour as behaviour_mod
from histaudit.verify import behaviour_spill
from histaudit.verify.behaviour import BehaviourCheck
from histaudit.verify.verifier import verify_chain

from .chains import INSTANCE, TRUST, chain, head_of
from .original_behaviour import OriginalBehaviourCheck

KIDS = ("a" * 16, "b" * 16)


def entries(steps: Iterable[tuple[str, dict[str, Any]]], *, seqs: Sequence[int] = (),
            kids: Sequence[int] = ()) -> list[Entry]:
    """Entries with the given kinds and data; entry numbers 1.. unless ``seqs`` says."""
    out = []
    for i, (kind, data) in enumerate(steps):
        seq = seqs[i] if i < len(seqs) else i + 1
        kid = KIDS[kids[i] % 2] if i < len(kids) else KIDS[0]
        out.append(Entry(instance=INSTANCE, seq=seq, leaf=i, prev="0" * 64, kind=kind,
                         ts="2026-12-01T00:00:00.000000Z", kid=kid, data=data, body=b""))
    return out


def outcome(check: Any, chain_entries: list[Entry]) -> Any:
    try:
        for entry in chain_entries:
            check.observe_entry(entry)
        return list(check.finish())
    except TypeError as exc:
        return ("TypeError", str(exc))


def assert_all_agree(chain_entries: list[Entry]) -> Any:
    """The new analyser, in memory and spilled, finds what the original found — except
    where the original crashed (a forged task id that is a JSON array or object): there
    the new one must not, and its two paths must agree."""
    expected = outcome(OriginalBehaviourCheck(INSTANCE), chain_entries)
    in_memory = outcome(BehaviourCheck(INSTANCE, spill_at=10**9), chain_entries)
    if isinstance(expected, tuple):
        assert isinstance(in_memory, list), in_memory
        expected = in_memory
    assert in_memory == expected
    for spill_at in (1, 2, 3):
        spilled = BehaviourCheck(INSTANCE, spill_at=spill_at)
        assert outcome(spilled, chain_entries) == expected, spill_at
        spilled.close()
    return expected


def started(task: Any, eid: Any = "e", activity: Any = "charge") -> tuple[str, dict[str, Any]]:
    return ("activity.started", {"task_id": task, "execution_id": eid, "activity": activity})


def completed(task: Any, digest: Any, eid: Any = "e") -> tuple[str, dict[str, Any]]:
    return ("activity.completed", {"task_id": task, "execution_id": eid,
                                   "output_digest": digest})


def intent(task: Any, name: Any = "mail", key: Any = "k", eid: Any = "e"
           ) -> tuple[str, dict[str, Any]]:
    return ("effect.intent", {"task_id": task, "execution_id": eid, "name": name, "key": key})


def closing(kind: str, intent_seq: Any, name: Any = "mail", key: Any = "k"
            ) -> tuple[str, dict[str, Any]]:
    return (kind, {"name": name, "key": key, "intent_seq": intent_seq})


MISMATCH = ("replay.mismatch", {"task_id": 1, "activity": "charge", "completed_seq": 3,
                                "seen_digest": "f" * 40, "expected_digest": "e" * 40})

CASES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "duplicate execution": [started(1), completed(1, "d"), started(1), completed(1, "d")],
    "seven executions": [started(1)] * 7 + [completed(1, "d")],
    "nondeterministic": [started(1), completed(1, "d1"), started(1), completed(1, "d2"),
                         started(1), completed(1, "d3")],
    "double side effect": [started(1), intent(1), closing("effect.done", 2), started(1),
                           intent(1), closing("effect.done", 5)],
    "uncertain effect": [started(1), intent(1), started(1), completed(1, "d")],
    "uncertain, closed later by a stray entry": [started(1), intent(1), started(1),
                                                 closing("effect.failed", 2)],
    "closing before its intent": [closing("effect.done", 2), intent(1), started(1)],
    "skipped": [started(1), intent(1), closing("effect.done", 2), started(1),
                closing("effect.skipped", None), closing("effect.skipped", 2)],
    "replay mismatch": [started(1), completed(1, "d"), MISMATCH, MISMATCH],
    "task ids equal across types": [started(1), started(True), started(1.0), completed(1, "x"),
                                    completed(True, "y"), started("1")],
    "first written as True": [completed(True, "x"), started(1), started(1)],
    "float ids": [started(1.5), started(1.5), started(-0.0), started(0), completed(0.0, "a"),
                  completed(False, "b")],
    "huge ids": [started(2**64 - 1), started(2**64 - 1), started(2**63), intent(2**64 - 1),
                 started(2**64 - 1, activity="again")],
    "no execution id": [started(3, eid=None), started(3, eid=None), completed(3, "d", None)],
    "odd names and keys": [intent(1, None, None), closing("effect.done", True, None, None),
                           closing("effect.done", 9, "None", "None"), started(1)],
    "unhashable task on a start": [started(1), started([1])],
    "unhashable task on a completion": [completed({"a": 1}, "d")],
    "unhashable task on an open intent": [intent([2]), started(1)],
    "unhashable task on a closed intent": [intent([2]), closing("effect.done", 1)],
    "unhashable execution id": [intent(1, eid={"x": 1}), started(1)],
    "unhashable task run twice": [started([1, {"b": 2, "a": 1}]), started([1, {"a": 1, "b": 2}]),
                                  started([1])],
    "digest not a string": [started(1), completed(1, 5), completed(1, None)],
    "other effect kinds close intents": [intent(1), closing("effect.bogus", 1), started(1)],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_analyzer_agrees(case: str) -> None:
    assert_all_agree(entries(CASES[case]))


def test_the_cases_find_what_they_are_named_after() -> None:
    def codes(case: str) -> Any:
        got = assert_all_agree(entries(CASES[case]))
        return got if isinstance(got, tuple) else [f.code for f in got]

    assert codes("duplicate execution") == ["activity-reexecuted"]
    assert codes("nondeterministic") == ["activity-reexecuted", "activity-nondeterministic"]
    assert codes("double side effect") == ["activity-reexecuted", "effect-duplicate"]
    assert codes("uncertain effect") == ["activity-reexecuted", "effect-uncertain"]
    assert codes("skipped") == ["activity-reexecuted", "effect-deduplicated"]
    assert codes("replay mismatch") == ["replay-mismatch", "replay-mismatch"]
    assert codes("unhashable task on an open intent") == []  # never ran again: nothing to say
    assert codes("unhashable task on a closed intent") == []
    twice = assert_all_agree(entries(CASES["unhashable task run twice"]))
    assert [f.code for f in twice] == ["activity-reexecuted"]
    assert '(task [1,{"a":1,"b":2}]) ran 2 times' in twice[0].message


def test_forked_and_huge_entry_numbers_agree() -> None:
    steps = [started(1), intent(1), started(1), intent(1), closing("effect.done", 2),
             started(1), completed(1, "a"), completed(1, "b")]
    for seqs in ([1, 2, 3, 2, 4, 5, 6, 7], [1, 2, 2, 2, 3, 1, 9, 9],
                 [2**63 + i for i in (1, 2, 3, 4, 5, 6, 7, 8)],
                 [2**64 - 9 + i for i in (1, 2, 3, 2, 4, 5, 6, 7)]):
        steps[4] = closing("effect.done", seqs[1])
        assert_all_agree(entries(steps, seqs=seqs))


def test_spilled_events_really_leave_memory_and_the_files_go(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setattr(behaviour_spill.tempfile, "tempdir", str(tmp_path))
    chain_entries = entries(CASES["double side effect"] * 3)
    check = BehaviourCheck(INSTANCE, spill_at=2)
    for entry in chain_entries:
        check.observe_entry(entry)
    assert check.events.spill is not None
    assert len(check.events.starts) < 2 and len(check.events.effects) < 2
    assert any(tmp_path.iterdir())
    found = list(check.finish())
    assert found == outcome(OriginalBehaviourCheck(INSTANCE), chain_entries)
    assert {"activity-reexecuted", "effect-duplicate", "effect-uncertain"} == {
        f.code for f in found}
    assert not any(tmp_path.iterdir())


def test_a_long_instance_spills_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(behaviour_mod, "SPILL_AT", 5)
    steps = [s for t in range(20) for s in (started(t), completed(t, "d"))] + [started(7)]
    rows = chain(steps)
    spills: list[Any] = []
    real = behaviour_spill.Spill.views

    def seen(self: behaviour_spill.Spill) -> Any:
        spills.append(self)
        return real(self)

    monkeypatch.setattr(behaviour_spill.Spill, "views", seen)
    report = verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST)
    assert len(spills) == 1
    assert [(f.code, f.seq) for f in report.findings] == [("activity-reexecuted", 41)]


# --- random chains -----------------------------------------------------------------------

_task = st.sampled_from([0, 1, 2, True, False, 1.0, 2.0, 1.5, -0.0, "1", "a", None,
                         2**64 - 1, 2**63])
_eid = st.sampled_from([None, "", "e1", "e2", 7, 1.0])
_name = st.sampled_from(["mail", "pay", None, 3])
_intent_seq = st.one_of(st.integers(1, 30), st.sampled_from([True, 2.0, "3", None, 0]))
_step = st.one_of(
    st.builds(started, _task, _eid, st.sampled_from(["a", "b", 5])),
    st.builds(completed, _task, st.sampled_from(["d1", "d2", "d3", None, 4]), _eid),
    st.builds(intent, _task, _name, _name, _eid),
    st.builds(closing, st.sampled_from(["effect.done", "effect.skipped", "effect.failed",
                                        "effect.other"]), _intent_seq, _name, _name),
    st.just(MISMATCH),
    st.just(("workflow.started", {"task_id": 1})),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_step, max_size=30), kids=st.lists(st.integers(0, 1), max_size=30),
       seqs=st.one_of(st.just([]), st.lists(st.integers(1, 12), max_size=30)))
def test_random_chains_agree(steps: list[tuple[str, dict[str, Any]]], kids: list[int],
                             seqs: list[int]) -> None:
    assert_all_agree(entries(steps, seqs=seqs, kids=kids))
