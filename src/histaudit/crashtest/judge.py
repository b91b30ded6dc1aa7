"""Judging one run: what its ledger shows, and how that compares with the clean run.

:func:`evidence` reads every side effect's records and verifies every instance in the
ledger (child workflows too); :func:`judge` turns a run that reached a terminal state,
with its evidence, into its :class:`~histaudit.crashtest.results.Outcome` (the rules are
in :mod:`histaudit.crashtest.results`). Outputs are compared modulo each run's instance
id and without the fields the spec ignores (:mod:`histaudit.crashtest.ignore`).

An effect's executions are counted from what the harness knows: the ledger's
``effect.done`` records, and the crashes it injected. An app crash at
``after-effect:X`` fires after X's block ran and before its done
(:mod:`histaudit.interceptor.effects`), so it proves that attempt got through although
the ledger holds only its intent; it counts as one execution (:func:`executions`), and a
retry that did X again makes two — a proven duplicate, not an uncertainty. A retry that
found the effect done in the target system and said so with ``skip()`` adds none, nor
one told the effect's idempotency key (``key_told``: the service that deduplicates by it
got the same request twice).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from histaudit.errors import HistauditError
from histaudit.ledger.kinds import EFFECT_KINDS, Kind
from histaudit.verify.findings import BEHAVIOUR_CODES, EffectRef, Finding, Severity

from .discovery import base_point
from .ignore import without_paths
from .results import (
    DIVERGED,
    FAILED,
    FINDINGS,
    IDENTICAL,
    CleanRun,
    PointResult,
    doubled_text,
    short,
)
from .sandbox import RunState

__all__ = ["AFTER_EFFECT", "INSTANCE_PLACEHOLDER", "EffectKey", "Evidence", "cut_effects",
           "decode_output", "evidence", "executions", "first_difference", "judge",
           "without_instance"]

AFTER_EFFECT = "after-effect:"
"""The prefix of the point after an effect's block and before its done record."""

KEY_TOLD = "key_told"
"""The member of the record closing an attempt (done, skipped, failed) that says the
attempt read its effect's idempotency key (:mod:`histaudit.interceptor.effects`)."""

INSTANCE_PLACEHOLDER = "<instance-id>"
"""What a run's own instance id becomes in its output before outputs are compared: each
run of a matrix gets a fresh random id, so an output that names its instance (a report
title, a URL) would otherwise differ at every point."""


@dataclass(frozen=True)
class EffectKey:
    """What one instance's ledger shows of one side effect (a name and key)."""

    instance: str
    name: str
    key: str
    done: int = 0
    """``effect.done`` records."""
    skipped: bool = False
    """An ``effect.skipped``: an attempt found the effect already done."""
    told: bool = False
    """A record closing an attempt says it was told the idempotency key."""
    open: int = 0
    """Intents with no done, skipped or failed of their own: attempts cut short."""

    def executions(self, cut: int = 0) -> int:
        """Times the effect happened, when ``cut`` of its open attempts are known to have
        got through their block: each is one more, unless the attempts were told the
        idempotency key (every retry sent the service the same request). A skip with no
        done says an earlier attempt did it: once."""
        if cut and self.told:
            return max(self.done, 1)
        return self.done + cut or int(self.skipped)


@dataclass(frozen=True)
class Evidence:
    """What one run's ledger shows."""

    effects: dict[str, int]
    """Executions per effect name the ledger alone shows (:meth:`EffectKey.executions`:
    the ``effect.done`` records), names sorted."""
    findings: tuple[Finding, ...]
    """The verifier's findings over every instance, instance by instance."""
    finding_effects: tuple[str | None, ...]
    """The effect each finding is about (the ledger entry at its ``seq`` is an effect's)."""
    keys: tuple[EffectKey, ...] = field(default=())
    """Each effect (name and key) of each instance, for counting crashed attempts."""


def evidence(db_url: str, trust_dir: Path) -> Evidence:
    """Effect counts and the verifier's findings over every instance in the ledger."""
    from histaudit.ledger import records as rec
    from histaudit.ledger.keys import TrustStore
    from histaudit.ledger.store import Ledger
    from histaudit.verify.verifier import verify_instance

    trust = TrustStore.load(trust_dir)
    keys: list[EffectKey] = []
    findings: list[Finding] = []
    about: list[str | None] = []
    if not Path(db_url.removeprefix("sqlite:///")).exists():
        return Evidence({}, (), ())
    with Ledger.open(db_url) as ledger:
        for instance in ledger.instance_ids():
            named: dict[int, EffectRef] = {}
            seen: dict[EffectRef, dict[str, Any]] = {}
            closed: set[Any] = set()
            for row in ledger.entries(instance):
                try:
                    entry = rec.parse_entry(row.body)
                except HistauditError:
                    continue
                if entry.kind not in EFFECT_KINDS:
                    continue
                ref = EffectRef(str(entry.data.get("name")), str(entry.data.get("key")))
                named[entry.seq] = ref
                got = seen.setdefault(ref, {"done": 0, "skipped": False, "told": False,
                                            "intents": []})
                if entry.kind == Kind.EFFECT_INTENT:
                    got["intents"].append(entry.seq)
                    continue
                closed.add(entry.data.get("intent_seq"))
                got["told"] |= entry.data.get(KEY_TOLD) is True
                if entry.kind == Kind.EFFECT_DONE:
                    got["done"] += 1
                elif entry.kind == Kind.EFFECT_SKIPPED:
                    got["skipped"] = True
            keys.extend(EffectKey(instance, ref.name, ref.key, done=got["done"],
                                  skipped=got["skipped"], told=got["told"],
                                  open=sum(seq not in closed for seq in got["intents"]))
                        for ref, got in seen.items())
            report = verify_instance(ledger, instance, trust=trust, full=True, workers=1)
            for f in report.findings:
                # a finding at an effect's entry is about that effect, whatever its code
                effect = f.effect or (named.get(f.seq) if f.seq is not None else None)
                findings.append(f if effect is f.effect else replace(f, effect=effect))
                about.append(None if effect is None else effect.name)
    effects: Counter[str] = Counter()
    for k in keys:
        effects[k.name] += k.executions()
    return Evidence(dict(sorted(effects.items())), tuple(findings), tuple(about), tuple(keys))


def cut_effects(points: Iterable[str]) -> list[str]:
    """The effects whose attempt crashes at ``points`` cut after its block and before its
    done: X for each ``after-effect:X`` (``#n`` or not), once per crash."""
    return [base_point(p)[len(AFTER_EFFECT):] for p in points
            if base_point(p).startswith(AFTER_EFFECT)]


def executions(ev: Evidence, cut: Iterable[str] = ()) -> dict[str, int]:
    """Executions per effect name: what the ledger shows (``ev.effects``), and one attempt
    got through for each name in ``cut`` (:func:`cut_effects` of the run's app crashes).

    Which open attempt a crash cut is not in the ledger when several were open (parallel
    calls of one effect): each crash is put on the one whose count it raises least, so a
    count above the clean run's is proven whichever it was."""
    counts = Counter(ev.effects)
    taken: Counter[EffectKey] = Counter()
    for name in cut:
        options = [k for k in ev.keys if k.name == name and k.open > taken[k]]
        if not options:
            continue  # no open attempt: nothing the crash could have cut
        best = min(options, key=lambda k: k.executions(taken[k] + 1) - k.executions(taken[k]))
        counts[name] += best.executions(taken[best] + 1) - best.executions(taken[best])
        taken[best] += 1
    return dict(sorted(counts.items()))


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
          ignore: Sequence[str] = (), crashed: Sequence[str] = ()) -> PointResult:
    """``result`` with the outcome of a run that reached the terminal ``state``; the nodes
    the JSONPaths ``ignore`` select are left out of both outputs before they are compared
    (UsageError for a path that is not JSONPath). ``crashed``: the points the run's app
    crashes were at (an engine crash cuts no attempt: the app carries on), whose
    ``after-effect:`` points count executions (:func:`executions`).

    The detail starts with every effect executed more often than in the clean run, with
    both counts: such a point fails whatever the findings say
    (:attr:`PointResult.failing`)."""
    output = decode_output(state.output_text)
    effects = executions(ev, cut_effects(crashed))
    result = replace(result, status=state.status, output=output, effects=effects,
                     clean_effects=dict(clean.effects), findings=ev.findings,
                     finding_effects=ev.finding_effects)
    doubled = doubled_text(result.doubled)
    lead = f"{doubled}; " if doubled else ""
    if state.status != "COMPLETED":
        return replace(result, outcome=FAILED, detail=(
            f"{lead}workflow {state.status} where the clean run {clean.status}"
            + (f": {state.failure}" if state.failure else "")))
    integrity = sorted({f.code for f in ev.findings if f.code not in BEHAVIOUR_CODES})
    expected = without_instance(without_paths(clean.output, ignore), clean.instance)
    got = without_instance(without_paths(output, ignore), result.instance)
    where = first_difference(expected, got)
    output_matches = where is None
    diff: list[str] = []
    if where is not None:
        diff.append(f"output {where}")
    changed = sorted(n for n in set(clean.effects) | set(effects)
                     if clean.effects.get(n, 0) != effects.get(n, 0))
    rest = list(diff)  # the doubled effects lead the detail: their diff is not repeated
    for name in changed:
        here, there = effects.get(name, 0), clean.effects.get(name, 0)
        diff.append(f"effect {name}: "
                    + (f"done {_times(here)} in this run" if here else "not done in this run")
                    + (f", {_times(there)} in the clean run" if there
                       else ", not in the clean run"))
        if name not in result.doubled:
            rest.append(diff[-1])
    result = replace(result, output_matches=output_matches, diff=tuple(diff))
    if integrity:
        return replace(result, outcome=FAILED,
                       detail=lead + "ledger integrity: " + ", ".join(integrity))
    serious = [(f, effect) for f, effect in zip(ev.findings, ev.finding_effects)
               if f.severity >= Severity.WARNING]
    explained = {effect for _f, effect in serious if effect}
    unexplained = [d for d in diff if d.startswith("output")] + [
        f"effect {n}" for n in changed if n not in explained]
    if unexplained:
        return replace(result, outcome=DIVERGED, detail="; ".join(
            ([doubled] if doubled else []) + rest))
    if serious:
        codes = list(dict.fromkeys(f.code for f, _effect in serious))
        return replace(result, outcome=FINDINGS, detail=lead + ", ".join(codes)
                       + (f" ({'; '.join(rest)})" if rest else ""))
    return replace(result, outcome=IDENTICAL,
                   detail="same output and effects as the clean run")
