"""A matrix written out: the table on the terminal, the ``--json`` file, JUnit XML."""

from __future__ import annotations

import json
from typing import Any

from .results import DIVERGED, FAILED, FINDINGS, IDENTICAL, STUCK, MatrixResult, short
from .spec import DEFAULT_ENGINE, DEFAULT_FAIL_ON

__all__ = ["json_report", "junit_xml", "render"]

_OUTCOME_STYLE = {IDENTICAL: "green", FINDINGS: "yellow", DIVERGED: "bold red",
                  STUCK: "bold red", FAILED: "bold red"}


def render(result: MatrixResult, console: Any = None) -> None:
    """Print the matrix as a table, then what needs a look and the coverage."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False, soft_wrap=True, markup=False)
    clean = result.clean
    console.print(f"clean run of {result.target}: {clean.status} in {clean.wall:.1f}s, "
                  f"output {short(clean.output, 80)}, effects "
                  f"{short(clean.effects, 80)}, {len(clean.points)} crash points")
    console.print(_provenance_line(result))
    table = Table(header_style="bold")
    for col in ("point", "kind", "outcome", "codes", "wall"):
        table.add_column(col, overflow="fold", justify="right" if col == "wall" else "left")
    for p in result.points:
        style = _OUTCOME_STYLE[p.outcome]
        if p.outcome in (FINDINGS, IDENTICAL) and p.failing:  # --fail-on, a doubled effect
            style = "bold red"
        table.add_row(p.point, p.kind.value, Text(p.outcome.value, style=style),
                      ", ".join(p.codes) or "-", f"{p.wall:.1f}s")
    console.print(table)
    look = [p for p in result.points
            if p.outcome != IDENTICAL or p.failing or p.engine_restarts]
    for p in look:
        console.print(f"{p.point} ({p.kind}): {p.outcome} — {p.detail}")
        console.print(f"  rerun: {p.rerun}")
    restarts = sum(p.engine_restarts for p in result.points)
    if restarts:
        console.print(f"daprd stranded a workflow {restarts} time(s) after a crash (the "
                      "dapr 1.18.3 deadlock of docs/adr/0008-daprd.md); each time the "
                      "harness restarted daprd, as an operator would, and judged the end")
    if clean.not_reached:
        console.print("declared but never reached in the clean run: "
                      + ", ".join(clean.not_reached))
    summary = ", ".join(f"{n} {o}" for o, n in result.summary.items())
    runs = result.runs
    how = (f"in {runs['sweeps']} sweep(s) of {runs['sweep_crashes']} crashes and "
           f"{runs['isolated']} isolated run(s)" if result.mode == "sweep" else
           f"in {runs.get('isolated', len(result.points))} isolated runs")
    console.print(f"{len(result.points)} points {how}, {result.wall:.1f}s "
                  f"(jobs {result.jobs}): {summary}")


def _provenance_line(result: MatrixResult) -> str:
    """``commit 1a2b…, sample 5 points (seed 42), ignoring $.at, failing on warning,
    engine daprd`` for the header."""
    about = result.provenance
    parts = [f"commit {about['commit'] or 'unknown'}"]
    if about["sample"] is not None:
        parts.append(f"sample {about['sample']} points (seed {about['seed']})")
    if about["ignore"]:
        parts.append("ignoring " + ", ".join(about["ignore"]))
    if about["fail_on"] != str(DEFAULT_FAIL_ON):
        parts.append(f"failing on {about['fail_on']}")
    if result.spec.engine != DEFAULT_ENGINE:  # the standalone engine goes without saying
        parts.append(f"engine {result.spec.engine}")
    return ", ".join(parts)


def json_report(result: MatrixResult) -> bytes:
    """The ``--json`` file: one object (target, input, provenance, clean run, points,
    coverage)."""
    return (json.dumps(result.to_json(), indent=2, default=str) + "\n").encode("utf-8")


def _provenance_properties(result: MatrixResult) -> list[tuple[str, str]]:
    """commit, sample, seed, ignore, fail_on and engine as JUnit properties ("" for none;
    ignore as JSON)."""
    about = result.provenance
    return [("commit", about["commit"] or ""),
            ("sample", "" if about["sample"] is None else str(about["sample"])),
            ("seed", "" if about["seed"] is None else str(about["seed"])),
            ("ignore", json.dumps(about["ignore"])),
            ("fail_on", about["fail_on"]),
            ("engine", result.spec.engine)]


def junit_xml(result: MatrixResult) -> bytes:
    """JUnit XML: one testcase per point; a failure for each failing point (diverged,
    stuck, failed, an effect executed more often than in the clean run, a finding at or
    above ``--fail-on``)."""
    import xml.etree.ElementTree as ET

    failures = sum(p.failing for p in result.points)
    suite = ET.Element("testsuite", {
        "name": f"histaudit crashtest {result.target}", "tests": str(len(result.points)),
        "failures": str(failures), "errors": "0", "skipped": "0",
        "time": f"{result.wall:.3f}"})
    props = ET.SubElement(suite, "properties")
    for name, value in (("input", json.dumps(result.input, sort_keys=True)),
                        ("clean.output", json.dumps(result.clean.output, sort_keys=True)),
                        ("clean.effects", json.dumps(result.clean.effects, sort_keys=True)),
                        ("coverage.not_reached", ", ".join(result.clean.not_reached)),
                        *_provenance_properties(result)):
        ET.SubElement(props, "property", {"name": name, "value": value})
    workflow = result.target.rpartition(":")[2]
    for p in result.points:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"crashtest.{workflow}.{p.kind}", "name": p.point,
            "time": f"{p.wall:.3f}"})
        text = f"{p.detail}\ncodes: {', '.join(p.codes) or '-'}\nrerun: {p.rerun}"
        if p.failing:
            fail = ET.SubElement(case, "failure", {
                "message": f"{p.outcome}: {p.detail}"[:500], "type": p.outcome.value})
            fail.text = text + (f"\n--- worker output ---\n{p.log_tail}" if p.log_tail else "")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{p.outcome}: {text}"
    root = ET.Element("testsuites", {"tests": str(len(result.points)),
                                     "failures": str(failures)})
    root.append(suite)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml
