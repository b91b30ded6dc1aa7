"""Judging one run: what its ledger shows, and how that compares with the clean run.

:func:`evidence` counts the ``effect.done`` records per effect name and verifies every
instance in the ledger (child workflows too); :func:`judge` turns a run that reached a
terminal state, with its evidence, into its :class:`~histaudit.crashtest.results.Outcome`
(the rules are in :mod:`histaudit.crashtest.results`). Outputs are compared modulo each
run's instance id and without the fields the spec ignores
(:mod:`histaudit.crashtest.ignore`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from histaudit.errors import HistauditError
from histaudit.ledger.kinds import EFFECT_KINDS, Kind
from histaudit.verify.findings import BEHAVIOUR_CODES, EffectRef, Finding, Severity

from .ignore import without_paths
from .results import DIVERGED, FAILED, FINDINGS, IDENTICAL, CleanRun, PointResult, short
from .sandbox import RunState

__all__ = ["INSTANCE_PLACEHOLDER", "Evidence", "decode_output", "evidence",
           "first_difference", "judge", "without_instance"]

INSTANCE_PLACEHOLDER = "<instance-id>"
"""What a run's own instance id becomes in its output before outputs are compared: each
run of a matrix gets a fresh random id, so an output that names its instance (a report
title, a URL) would otherwise differ at every point."""


@dataclass(frozen=True)
class Evidence:
    """What one run's ledger shows."""

    effects: dict[str, int]
    """``effect.done`` records per effect name, names sorted."""
    findings: tuple[Finding, ...]
    """The verifier's findings over every instance, instance by instance."""
    finding_effects: tuple[str | None, ...]
    """The effect each finding is about (the ledger entry at its ``seq`` is an effect's)."""


def evidence(db_url: str, trust_dir: Path) -> Evidence:
    """Effect counts and the verifier's findings over every instance in the ledger."""
    from histaudit.ledger import records as rec
    from histaudit.ledger.keys import TrustStore
    from histaudit.ledger.store import Ledger
    from histaudit.verify.verifier import verify_instance

    trust = TrustStore.load(trust_dir)
    effects: Counter[str] = Counter()
    findings: list[Finding] = []
    about: list[str | None] = []
    if not Path(db_url.removeprefix("sqlite:///")).exists():
        return Evidence({}, (), ())
    with Ledger.open(db_url) as ledger:
        for instance in ledger.instance_ids():
            named: dict[int, EffectRef] = {}
            for row in ledger.entries(instance):
                try:
                    entry = rec.parse_entry(row.body)
                except HistauditError:
                    continue
                if entry.kind in EFFECT_KINDS:
                    named[entry.seq] = EffectRef(str(entry.data.get("name")),
                                                 str(entry.data.get("key")))
                    if entry.kind == Kind.EFFECT_DONE:
                        effects[str(entry.data.get("name"))] += 1
            report = verify_instance(ledger, instance, trust=trust, full=True, workers=1)
            for f in report.findings:
                # a finding at an effect's entry is about that effect, whatever its code
                effect = f.effect or (named.get(f.seq) if f.seq is not None else None)
                findings.append(f if effect is f.effect else replace(f, effect=effect))
                about.append(None if effect is None else effect.name)
    return Evidence(dict(sorted(effects.items())), tuple(findings), tuple(about))


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def decode_output(text: str | None) -> Any:
    """A workflow's serialized output as a value (the text itself if it is not JSON)."""
    if text is None or text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def without_instance(value: Any, instance: str | None) -> Any:
    """``value`` with every occurrence of ``instance`` inside its strings (object keys
    too) replaced by :data:`INSTANCE_PLACEHOLDER`."""
    if not instance:
        return value
    if isinstance(value, str):
        return value.replace(instance, INSTANCE_PLACEHOLDER)
    if isinstance(value, list):
        return [without_instance(v, instance) for v in value]
    if isinstance(value, dict):
        return {without_instance(k, instance): without_instance(v, instance)
                for k, v in value.items()}
    return value


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    """Where ``a`` and ``b`` first differ, as ``$.field[3]: old -> new``; None if equal."""
    if type(a) is type(b) and isinstance(a, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                missing = "(absent)"
                return (f"{path}.{key}: {short(a.get(key, missing), 60)} -> "
                        f"{short(b.get(key, missing), 60)}")
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if type(a) is type(b) and isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path}: {len(a)} items -> {len(b)} items"
        return None
    return None if a == b else f"{path}: {short(a, 60)} -> {short(b, 60)}"


def judge(result: PointResult, clean: CleanRun, state: RunState, ev: Evidence, *,
          ignore: Sequence[str] = ()) -> PointResult:
    """``result`` with the outcome of a run that reached the terminal ``state``; the nodes
    the JSONPaths ``ignore`` select are left out of both outputs before they are compared
    (UsageError for a path that is not JSONPath)."""
    output = decode_output(state.output_text)
    result = replace(result, status=state.status, output=output, effects=ev.effects,
                     findings=ev.findings, finding_effects=ev.finding_effects)
    if state.status != "COMPLETED":
        return replace(result, outcome=FAILED, detail=f"workflow {state.status}" + (
            f": {state.failure}" if state.failure else ""))
    integrity = sorted({f.code for f in ev.findings if f.code not in BEHAVIOUR_CODES})
    expected = without_instance(without_paths(clean.output, ignore), clean.instance)
    got = without_instance(without_paths(output, ignore), result.instance)
    where = first_difference(expected, got)
    output_matches = where is None
    diff: list[str] = []
    if where is not None:
        diff.append(f"output {where}")
    changed = sorted(n for n in set(clean.effects) | set(ev.effects)
                     if clean.effects.get(n, 0) != ev.effects.get(n, 0))
    for name in changed:
        here, there = ev.effects.get(name, 0), clean.effects.get(name, 0)
        diff.append(f"effect {name}: "
                    + (f"done {_times(here)} in this run" if here else "not done in this run")
                    + (f", {_times(there)} in the clean run" if there
                       else ", not in the clean run"))
    result = replace(result, output_matches=output_matches, diff=tuple(diff))
    if integrity:
        return replace(result, outcome=FAILED,
                       detail="ledger integrity: " + ", ".join(integrity))
    serious = [(f, effect) for f, effect in zip(ev.findings, ev.finding_effects)
               if f.severity >= Severity.WARNING]
    explained = {effect for _f, effect in serious if effect}
    unexplained = [d for d in diff if d.startswith("output")] + [
        f"effect {n}" for n in changed if n not in explained]
    if unexplained:
        return replace(result, outcome=DIVERGED, detail="; ".join(diff))
    if serious:
        codes = list(dict.fromkeys(f.code for f, _effect in serious))
        return replace(result, outcome=FINDINGS,
                       detail=", ".join(codes) + (f" ({'; '.join(diff)})" if diff else ""))
    return replace(result, outcome=IDENTICAL,
                   detail="same output and effects as the clean run")
