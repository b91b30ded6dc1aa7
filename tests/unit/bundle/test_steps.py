"""Entries grouped into steps, attempts and workers, as the report draws them."""

from __future__ import annotations

from histaudit.bundle.steps import StepGroup, analyse, collapse

from .report_cases import A, B, Builder, crashed_run


def test_a_crash_mid_step_shows_as_an_attempt_cut_short_and_run_again() -> None:
    entries, seqs = crashed_run()
    run = analyse(entries)
    assert [s.activity for s in run.steps] == ["summarize", "post_comment"]
    summarize, post = run.steps
    assert summarize.deliveries == 1 and not summarize.ran_again_after_crash
    assert not summarize.eventful and summarize.outcome == "completed"
    assert post.deliveries == 2 and post.ran_again_after_crash
    assert [a.worker for a in post.attempts] == [A, B]
    assert [a.outcome for a in post.attempts] == [None, "completed"]
    assert post.attempts[0].last == seqs["done1"]  # it stopped after its effect was done
    (effect,) = post.effects.values()
    assert effect.duplicate and effect.done == [seqs["done1"], seqs["done2"]]
    assert post.duplicates == [effect] and post.eventful
    assert [(w.name, w.index) for w in run.workers] == [(A, 0), (B, 1)]
    assert run.workers[0].cut_short == [post] and run.workers[1].cut_short == []
    assert [k for _, k in run.marks] == ["workflow.started", "workflow.completed"]
    assert (run.first, run.last) == (1, seqs["end"])


def test_a_redelivery_after_a_finished_attempt_is_not_a_crash() -> None:
    b = Builder()
    b.step(1, "charge", A)
    b.step(1, "charge", A, attempt=2)
    (step,) = analyse(b.entries).steps
    assert step.deliveries == 2 and not step.ran_again_after_crash and step.eventful


def test_collapse_sums_up_uneventful_runs_only_when_over_the_limit() -> None:
    b = Builder()
    for task in range(1, 11):
        b.step(task, f"s{task}", A)
    b.step(11, "flaky", A, finish=False)
    b.step(11, "flaky", B, attempt=2)
    for task in range(12, 15):
        b.step(task, f"s{task}", B)
    steps = analyse(b.entries).steps
    assert collapse(steps, 100) == (steps, 0)
    lines, dropped = collapse(steps, 5)
    assert dropped == 0 and len(lines) == 3
    assert isinstance(lines[0], StepGroup) and len(lines[0].steps) == 10
    assert lines[1] is steps[10] and lines[1].activity == "flaky"
    assert isinstance(lines[2], StepGroup) and len(lines[2].steps) == 3
    lines, dropped = collapse(steps, 2)
    assert len(lines) == 2 and dropped == 3
