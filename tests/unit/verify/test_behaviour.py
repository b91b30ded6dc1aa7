"""histaudit.verify.behaviour: the same findings in memory, spilled to disk, and as the
original analyzer made them.

Every chain here goes through three analyzers: the original (``original_behaviour``, a
copy of the code before events could leave memory), the new one with everything in
memory, and the new one forced to spill after one, two or three events per list. Their
``finish()`` lists must be equal — same findings, same messages, same order — or all
three must raise the same error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
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

from .chains import INSTANCE, TRUST, chain, head_of, reference
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
    with on_disk_at_once():
        spilled = BehaviourCheck(INSTANCE, spill_at=1)
        assert outcome(spilled, chain_entries) == expected, "every batch on disk"
        spilled.close()
    return expected


@contextlib.contextmanager
def on_disk_at_once() -> Iterator[None]:
    """The spill's hash arrays and intent partitions written to their files after every
    batch, as past their in-memory sizes on a long instance."""
    sizes = behaviour_spill._HASHES_IN_MEMORY, behaviour_spill._PAIRS_IN_MEMORY
    behaviour_spill._HASHES_IN_MEMORY = behaviour_spill._PAIRS_IN_MEMORY = 1
    try:
        yield
    finally:
        behaviour_spill._HASHES_IN_MEMORY, behaviour_spill._PAIRS_IN_MEMORY = sizes


def started(task: Any, eid: Any = "e", activity: Any = "charge") -> tuple[str, dict[str, Any]]:
    return ("activity.started", {"task_id": task, "execution_id": eid, "activity": activity})


def completed(task: Any, digest: Any, eid: Any = "e") -> tuple[str, dict[str, Any]]:
    return ("activity.completed", {"task_id": task, "execution_id": eid,
                                   "output_digest": digest})


def intent(task: Any, name: Any = "mail", key: Any = "k", eid: Any = "e"
           ) -> tuple[str, dict[str, Any]]:
    return ("effect.intent", {"task_id": task, "execution_id": eid, "name": name, "key": key})


def closing(kind: str, intent_seq: Any, name: Any = "mail", key: Any = "k",
            key_told: bool = False) -> tuple[str, dict[str, Any]]:
    told = {"key_told": True} if key_told else {}
    return (kind, {"name": name, "key": key, "intent_seq": intent_seq, **told})


def failed(task: Any, eid: Any = "e") -> tuple[str, dict[str, Any]]:
    return ("activity.failed", {"task_id": task, "execution_id": eid, "error_type": "E"})


def wf_started(at: Any = "2026-12-01T00:00:00Z") -> tuple[str, dict[str, Any]]:
    return ("workflow.started", {"workflow": "w", "started_at": at})


def scheduled(task: Any, eid: Any = "x1", activity: Any = "charge", *, replayed: bool = False,
              child: bool = False) -> tuple[str, dict[str, Any]]:
    if child:
        return ("workflow.scheduled_child", {"child_workflow": activity, "task_id": task,
                                             "child_instance": eid})
    data = {"activity": activity, "task_id": task, "execution_id": eid}
    return ("workflow.scheduled_activity", {**data, "replayed": True} if replayed else data)


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
    "decisions signed twice": [wf_started(), scheduled(0), scheduled(0, "x2"), wf_started(),
                               scheduled(1, child=True), scheduled(1, "c", child=True),
                               scheduled(2), scheduled(2.0), scheduled(True), scheduled("3"),
                               scheduled(3), scheduled(3)],
    "decisions across generations and legacy starts": [
        wf_started("a"), scheduled(0), wf_started("b"), scheduled(0), wf_started(None),
        scheduled(0), scheduled(0), wf_started(7), scheduled(1), scheduled(1)],
    "failures and odd completions are runs": [started(1), failed(1), started(1),
                                              completed(1, None), started(1), failed(2),
                                              started(2), failed(2)],
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
    resigned = assert_all_agree(entries(CASES["decisions signed twice"]))
    assert [(f.code, f.seq) for f in resigned] == [("decision-resigned", s) for s in (4, 3, 6, 12)]
    assert codes("decisions across generations and legacy starts") == []
    twice = assert_all_agree(entries(CASES["unhashable task run twice"]))
    assert [f.code for f in twice] == ["activity-reexecuted"]
    assert '(task [1,{"a":1,"b":2}]) delivered 2 times' in twice[0].message


# Each case: the steps, and the end of the one message of its code (issue 13).
WORDING: dict[str, tuple[str, list[tuple[str, dict[str, Any]]], str]] = {
    "first delivery crashed before the body": (
        "activity-reexecuted", [started(1), started(1), completed(1, "d")],
        "delivered 2 times (starts at entries 1, 2); the body is known to have run 1 time"),
    "both deliveries ran": (
        "activity-reexecuted", [started(1), completed(1, "d"), started(1), completed(1, "d")],
        "delivered 2 times (starts at entries 1, 3); the body ran each time"),
    "two deliveries at once, both completed": (
        "activity-reexecuted", [started(1), started(1), completed(1, "d"), completed(1, "d")],
        "delivered 2 times (starts at entries 1, 2); the body ran each time"),
    "an effect intent and one completion after two starts are one run": (
        "activity-reexecuted", [started(1), started(1), intent(1), completed(1, "d")],
        "delivered 2 times (starts at entries 1, 2); the body is known to have run 1 time"),
    "a failure and an effect intent are runs too": (
        "activity-reexecuted", [started(1), failed(1), started(1), intent(1), started(1)],
        "delivered 3 times (starts at entries 1, 3, 5); the body is known to have run 2 times"),
    "a completion without a digest is a run": (
        "activity-reexecuted", [started(1), completed(1, None), started(1)],
        "the body is known to have run 1 time"),
    "records of another task are not runs": (
        "activity-reexecuted", [started(1), completed(2, "d"), intent(2), started(1)],
        "no record shows the body ran"),
    "the retry did it again": (
        "effect-uncertain", [started(1), intent(1), started(1), intent(1),
                             closing("effect.done", 4), completed(1, "d")],
        "intent at entry 2 never confirmed, and the activity ran again — unknown whether "
        "the first attempt got through; the retry did it (effect.done at entry 5): a "
        "duplicate if it had"),
    "the retry did it with the key it was told": (
        "effect-uncertain", [started(1), intent(1), started(1), intent(1),
                             closing("effect.done", 4, key_told=True), completed(1, "d")],
        "the retry did it (effect.done at entry 5) with the same idempotency key, which the "
        "attempt handed on: a duplicate only if the service it called does not "
        "deduplicate by it"),
    "the retry skipped it": (
        "effect-uncertain", [started(1), intent(1), started(1), intent(1),
                             closing("effect.skipped", 4), completed(1, "d")],
        "ran again — the retry skipped it (effect.skipped at entry 5)"),
    "the retry has not confirmed it": (
        "effect-uncertain", [started(1), intent(1), started(1), intent(1),
                             closing("effect.failed", 4)],
        "ran again — it may have happened, and the retry has not confirmed it either"),
    "a decision signed twice": (
        "decision-resigned", [wf_started(), scheduled(0), started(0), completed(0, "d"),
                              scheduled(1, "x1", "send"), scheduled(1, "x2", "send")],
        "workflow.scheduled_activity of send (task 1) signed 2 times (entries 5, 6): the "
        "workflow made it again — the engine had not kept the first (e.g. it was killed "
        "while a result was in flight)"),
    "a start signed twice": (
        "decision-resigned", [wf_started("t0"), scheduled(0), wf_started("t0")],
        "workflow.started at t0 signed 2 times (entries 1, 3): the workflow made it again"
        " — the engine had not kept the first (e.g. it was killed while a result was in "
        "flight)"),
    "a done before the intent is not the retry's": (
        "effect-uncertain", [started(1), intent(1), closing("effect.done", 2), started(1),
                             intent(1), started(1)],
        "intent at entry 5 never confirmed, and the activity ran again — it may have "
        "happened, and the retry has not confirmed it either"),
}


def test_a_decision_re_appended_on_replay_is_normal() -> None:
    """The record of a decision was lost (power loss) and the replay appended it, marked
    ``replayed``: one record of it, nothing to report; a new generation's task ids and a
    legacy start (no ``started_at``) name no decision already made."""
    steps = [wf_started(), scheduled(0), started(0), completed(0, "d"),
             scheduled(1, replayed=True), started(1), completed(1, "e"),
             ("workflow.continued_as_new", {}), wf_started("2026-12-02T00:00:00Z"),
             scheduled(0), scheduled(1), wf_started(None), scheduled(0), scheduled(0)]
    assert assert_all_agree(entries(steps)) == []
    rows = chain(steps)
    report = verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST)
    assert report.findings == () and list(report.findings) == reference(rows, head_of(rows))[1]


@pytest.mark.parametrize("case", sorted(WORDING))
def test_findings_say_what_the_ledger_knows(case: str) -> None:
    code, steps, ending = WORDING[case]
    found = [f for f in assert_all_agree(entries(steps)) if f.code == code]
    assert len(found) == 1 and found[0].message.endswith(ending), found
    rows = chain(steps)
    fast = verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST).findings
    assert list(fast) == reference(rows, head_of(rows))[1]
    assert [f.message for f in fast if f.code == code] == [found[0].message]


def test_a_resigned_decision_names_its_task_and_activity() -> None:
    """In memory, spilled and in the original: a scheduled activity names its task id and
    activity, a huge task id survives the spill, and a start names neither."""
    _code, steps, _end = WORDING["a decision signed twice"]
    (found,) = [f for f in assert_all_agree(entries(steps)) if f.code == "decision-resigned"]
    assert (found.task_id, found.activity, found.entries) == (1, "send", (5, 6))
    huge = [wf_started(), scheduled(2**70, "x1", "send"), scheduled(2**70, "x2", "send")]
    (found,) = assert_all_agree(entries(huge))
    assert (found.task_id, found.activity) == (2**70, "send")
    _code, steps, _end = WORDING["a start signed twice"]
    (found,) = [f for f in assert_all_agree(entries(steps)) if f.code == "decision-resigned"]
    assert (found.task_id, found.activity) == (None, None)


def test_an_uncertain_effect_names_the_task_that_ran_again() -> None:
    """In memory, spilled and in the original: the intent's task id and activity, a task id
    beyond 64 bits included, and the task of that intent, not another one's."""
    _code, steps, _end = WORDING["the retry did it again"]
    (found,) = [f for f in assert_all_agree(entries(steps)) if f.code == "effect-uncertain"]
    assert (found.task_id, found.activity, found.seq) == (1, "charge", 2)
    huge = [started(2**70, activity="send"), intent(2**70), started(7, activity="other"),
            started(2**70, activity="send")]
    (found,) = [f for f in assert_all_agree(entries(huge)) if f.code == "effect-uncertain"]
    assert (found.task_id, found.activity, found.seq) == (2**70, "send", 2)
    assert found.to_json()["task_id"] == 2**70


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
    st.builds(failed, _task, _eid),
    st.builds(wf_started, st.sampled_from(["t0", "t1", None, 3])),
    st.builds(scheduled, _task, _eid, st.sampled_from(["a", None]),
              replayed=st.booleans(), child=st.booleans()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_step, max_size=30), kids=st.lists(st.integers(0, 1), max_size=30),
       seqs=st.one_of(st.just([]), st.lists(st.integers(1, 12), max_size=30)))
def test_random_chains_agree(steps: list[tuple[str, dict[str, Any]]], kids: list[int],
                             seqs: list[int]) -> None:
    assert_all_agree(entries(steps, seqs=seqs, kids=kids))
