"""``histaudit crashtest``: the crash matrix of one workflow."""

from __future__ import annotations

import sys
import time

import click

from histaudit.errors import UsageError
from histaudit.verify.findings import Severity

from . import render
from .options import Seconds, check_writable, write_file


@click.command("crashtest")
@click.argument("target", metavar="MODULE_OR_FILE:WORKFLOW")
@click.option("--input", "input_json", required=True, metavar="JSON",
              help="The workflow input, as JSON.")
@click.option("--app", metavar="MODULE", help="Module (or .py file) holding the "
              "WorkflowRuntime, when it is not the target's module.")
@click.option("--mode", type=click.Choice(["sweep", "isolated"]), default="sweep",
              show_default=True, help="sweep: one instance crashed at every point in "
              "turn (a restart per point; whatever is not clean is confirmed in a run of "
              "its own); isolated: every point a run of its own, from the start.")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Runs at once, each with its own engine and workers (sweep: the app "
              "and the engine sweep side by side).")
@click.option("--junit", "junit_file", metavar="FILE", help="Also write JUnit XML.")
@click.option("--json", "json_file", metavar="FILE", help="Also write the result as JSON.")
@click.option("--point", "--points", "points", multiple=True, metavar="P",
              help="Only these points (repeatable): a name (after_post, "
              "after:fetch_source#2 = its 2nd pass), a step (before:step:87, after:step:87 "
              "= step:87; step N is the workflow's N-th activity), a glob ('after:*') or "
              "a step range (step:80-90).")
@click.option("--engine", "engine", type=click.Choice(["durabletask", "daprd"]),
              default="durabletask", show_default=True, help="What the runs talk to: "
              "the standalone durabletask-go engine, or real daprd with placement and "
              "scheduler (`make daprd`); an engine crash SIGKILLs and restarts daprd.")
@click.option("--resources", metavar="DIR", help="With --engine daprd: Dapr component "
              "files (*.yaml) every run's daprd loads, e.g. a DurableAgent's "
              "agent-workflow state store; a relative path in them is per run.")
@click.option("--engine-crash", is_flag=True, help="Crash the engine (not the app) at the "
              "points.")
@click.option("--no-engine-points", is_flag=True, help="App crashes only.")
@click.option("--timeout", type=Seconds(1, 3600), default=60.0, show_default=True,
              help="Seconds a run may take to crash, and then to complete.")
@click.option("--lock-timeout", type=Seconds(0.1, 600), default=3.0,
              show_default=True, metavar="SECONDS", help="The engine's work-item lock in "
              "engine-crash runs on durabletask (daprd has its own): how long a restarted "
              "engine waits before it dispatches the interrupted step again (keep it above "
              "your slowest activity).")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Environment for the workers (repeatable), e.g. IDEMPOTENT=1.")
@click.option("--event", "event_pairs", multiple=True, metavar="NAME=JSON",
              help="Raise this external event on every run's instance right after it is "
              "scheduled (repeatable, in order), e.g. approved='{\"by\": \"ops\"}'.")
@click.option("--ignore", multiple=True, metavar="JSONPATH",
              help="Leave these output fields out when outputs are compared (repeatable, "
              "RFC 9535 JSONPath), e.g. '$.generated_at' or '$..id'.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error",
              show_default=True, help="Lowest finding severity that fails a point, as for "
              "verify. Whatever it is, a point fails when it diverged, got stuck or failed, "
              "or did a side effect more often than the clean run.")
@click.option("--sample", type=click.IntRange(min=1), metavar="K",
              help="Run only K of the selected points, chosen with --seed.")
@click.option("--seed", type=int, metavar="N", help="Seed of the --sample choice "
              "(default: a random one, shown in the reports).")
@click.option("--rerun-from", "rerun_from", type=click.IntRange(min=0), metavar="EVENT_ID",
              help="With --engine daprd: crash a rerun. Every run first completes the "
              "workflow as a source instance, then reruns it from this history event "
              "(rerun_workflow_from_event); the rerun is crashed and judged.")
def crashtest(target: str, input_json: str, app: str | None, mode: str, jobs: int,
              junit_file: str | None, json_file: str | None, points: tuple[str, ...],
              engine: str, engine_crash: bool, no_engine_points: bool, timeout: float,
              lock_timeout: float, env_pairs: tuple[str, ...], ignore: tuple[str, ...],
              sample: int | None, seed: int | None, resources: str | None,
              event_pairs: tuple[str, ...], fail_on: str, rerun_from: int | None) -> int:
    """Crash the workflow at every crash point it reaches, recover, compare with a clean
    run. Exit 1 if any point diverged, got stuck, failed (the workflow too), did a side
    effect more often than the clean run (a crash at after-effect:X counts X's cut
    attempt), or has a finding at or above --fail-on."""
    from histaudit import crashtest as ct

    if engine_crash and no_engine_points:
        raise UsageError("--engine-crash and --no-engine-points exclude each other")
    inp = ct.parse_input(input_json)
    env = ct.parse_env(env_pairs)
    events = ct.parse_events(event_pairs)
    for out in (junit_file, json_file):  # before the run, not after it
        if out:
            check_writable(out)

    began = time.monotonic()

    def progress(p: ct.PointResult, done: int, total: int) -> None:
        if mode == "sweep":  # a confirmation or fallback: how many there are is not known
            click.echo(f"[alone] {p.point} ({p.kind}): {p.outcome} {p.wall:.1f}s", err=True)
            return
        click.echo(f"[{done}/{total}] {p.point} ({p.kind}): {p.outcome} {p.wall:.1f}s"
                   f"{_eta(done, total)}", err=True)

    def on_crash(point: str, kind: ct.CrashKind, done: int, total: int) -> None:
        click.echo(f"[{done}/{total}] {kind} sweep: crashed at {point}, resuming"
                   f"{_eta(done, total)}", err=True)

    def _eta(done: int, total: int) -> str:
        if done >= total:
            return ""
        return f" · about {(time.monotonic() - began) / done * (total - done):.0f}s to go"

    spec = ct.CrashSpec(target=target, input=inp, app=app, env=env, timeout=timeout,
                        lock_timeout=lock_timeout, engine=engine,
                        ignore=ignore, sample=sample, seed=seed, resources=resources,
                        events=events, fail_on=Severity.parse(fail_on),
                        rerun_from=rerun_from)
    # On a terminal, say what happens from the first second (the clean run can take a
    # while); piped output stays one line per point.
    tty = sys.stderr.isatty()
    if tty:
        click.echo(f"clean run of {target} (no crash): recording every point it passes…",
                   err=True)
    clean = ct.run_clean(spec)
    if tty:
        click.echo(f"clean run: {clean.status} in {clean.wall:.1f}s, {len(clean.points)} "
                   f"points; crashing at them now", err=True)
    chosen: list[str] | None = list(points) or None
    if spec.sample is not None and spec.seed is not None:  # a spec's sample has its seed
        selected = ct.select_points(points, clean.points, clean.aliases) if points \
            else clean.points
        chosen = ct.sample_points(selected, spec.sample, spec.seed)
    began = time.monotonic()
    result = ct.run_matrix(spec, jobs=jobs, points=chosen, app_points=not engine_crash,
                           engine_points=not no_engine_points, progress=progress, clean=clean,
                           mode=mode, on_crash=on_crash)
    ct.render(result, render.console())
    if json_file:
        write_file(json_file, ct.json_report(result))
    if junit_file:
        write_file(junit_file, ct.junit_xml(result))
    return result.exit_code
