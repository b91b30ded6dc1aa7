"""Retention: erase stored payloads past the term a policy gives them, never one on hold.

The law's retention is not the engine's (issue #42): Dapr purges workflow histories on its
own schedule, while the AI Act asks for logs kept at least six months, and privacy law for
personal data erased once its purpose ends. The ledger keeps every *entry* for good (the
chain is the proof; an entry cannot leave it without breaking every later hash); what a
policy limits is how long the *payloads* an entry commits to (inputs, outputs, LLM
prompts) stay stored. A payload past its term is erased through the signed-erasure path
(:func:`~histaudit.ledger.chain.erase_payload`): the row is deleted and a signed
``payload.erased`` naming the entry, the field and the rule is appended in the same
transaction, so the chain still verifies and the erasure is provable.

The policy is a JSON file::

    {"version": 1,
     "payloads": [{"kinds": ["llm.*"], "keep_days": 30},
                  {"kinds": ["activity.*"], "workflows": ["claims*"], "keep_days": 180}],
     "holds": [{"instances": ["claim-2026-0042"], "reason": "litigation hold LH-12"}]}

A payload's rule is the first whose ``kinds`` and ``workflows`` (glob patterns; a missing
list matches all) match its entry's kind and its instance's workflow; with no rule a
payload is kept. An instance a hold names keeps every payload, due or not. A hold names
instances exactly — ids may hold ``[``, ``*`` or ``?``, and a hold on ``case[7]`` holds
that instance and no other — and globs only behind ``glob:`` (``"glob:claim-2026-*"``).
A hold's name or pattern that matches no instance of the ledger is named in what
``retention apply`` and ``report`` say (:meth:`Policy.unmatched_holds`), so a mistyped
id is seen rather than held in vain.

:func:`apply` is idempotent and crash-safe: each erasure is one transaction, a payload
already erased (its ``payload.erased`` signed) is never erased again, so a run cut short
anywhere is finished by running it again, and says the same thing when nothing is left.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson

from histaudit.crash import crash_point
from histaudit.errors import FormatError, HistauditError, InputError
from histaudit.inputs import read_limited
from histaudit.urls import shown_word

from . import records as rec
from .chain import erase_payload
from .keys import Signer, parse_time
from .kinds import Kind
from .store import Ledger

__all__ = ["Hold", "Policy", "Rule", "Tally", "apply", "kept_payloads", "parsed_entries",
           "read_policy"]

POLICY_LIMIT = 1 << 20
VERSION = 1
KEPT, HELD, ERASED, ALREADY = "kept", "held", "erased", "already-erased"
GLOB = "glob:"
"""The prefix of a hold's instance pattern that globs (``fnmatch``); any other is exact."""


@dataclass(frozen=True)
class Rule:
    kinds: tuple[str, ...]
    workflows: tuple[str, ...]
    keep_days: int

    def matches(self, kind: str, workflow: str) -> bool:
        # globs, with or without the glob: prefix a hold's patterns need
        return any(fnmatch.fnmatchcase(kind, k.removeprefix(GLOB)) for k in self.kinds) \
            and any(fnmatch.fnmatchcase(workflow, w.removeprefix(GLOB))
                    for w in self.workflows)


@dataclass(frozen=True)
class Hold:
    instances: tuple[str, ...]
    """Instance ids, exact, or glob patterns behind :data:`GLOB`."""
    reason: str

    def covers(self, instance: str) -> bool:
        return any(_names(p, instance) for p in self.instances)


def _names(pattern: str, instance: str) -> bool:
    if pattern.startswith(GLOB):
        return fnmatch.fnmatchcase(instance, pattern[len(GLOB):])
    return instance == pattern


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    holds: tuple[Hold, ...]
    digest: str
    """SHA-256 of the policy file's bytes, first 16 hex digits: which policy erased what."""

    def rule_for(self, kind: str, workflow: str) -> tuple[int, Rule] | None:
        for n, rule in enumerate(self.rules, start=1):
            if rule.matches(kind, workflow):
                return n, rule
        return None

    def hold_for(self, instance: str) -> Hold | None:
        return next((h for h in self.holds if h.covers(instance)), None)

    def unmatched_holds(self, instances: Iterable[str]) -> list[dict[str, Any]]:
        """Each hold (numbered from 1) with the names and patterns of it that match none
        of ``instances``: ``{"hold", "instances", "reason"}``."""
        ids = set(instances)
        found = []
        for n, hold in enumerate(self.holds, start=1):
            idle = [p for p in hold.instances
                    if not (p in ids if not p.startswith(GLOB)
                            else any(_names(p, i) for i in ids))]
            if idle:
                found.append({"hold": n, "instances": idle, "reason": hold.reason})
        return found


def _strings(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key, ["*"])
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and len(v.removeprefix(GLOB)) > 0 and len(v) <= 200
            for v in value):
        raise FormatError(f"{where}: {key} must be a non-empty list of patterns")
    return tuple(value)


def _items(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """``doc[key]``, a list ([] when absent); FormatError when it is anything else (null
    included)."""
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise FormatError(f"{where}: {key} must be a list (of objects), not "
                          f"{'null' if value is None else type(value).__name__}")
    return value


def read_policy(path: str) -> Policy:
    """Read and check a policy file; InputError (FormatError) naming what is wrong."""
    data = read_limited(path, "retention policy", POLICY_LIMIT)
    where = f"retention policy {path}"
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise FormatError(f"{where} is not JSON") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{where} is not a JSON object")
    if doc.get("version") != VERSION:
        raise FormatError(f"{where}: version {shown_word(str(doc.get('version')), 20)} is not "
                          f"{VERSION}, the one this histaudit reads")
    unknown = sorted(set(doc) - {"version", "payloads", "holds"})
    if unknown:
        raise FormatError(f"{where}: unknown member(s) "
                          f"{', '.join(shown_word(u, 40) for u in unknown[:4])}")
    rules: list[Rule] = []
    for n, item in enumerate(_items(doc, "payloads", where), start=1):
        at = f"{where}: payloads[{n}]"
        if not isinstance(item, dict) or set(item) - {"kinds", "workflows", "keep_days"}:
            raise FormatError(f"{at} must be an object of kinds, workflows, keep_days")
        days = item.get("keep_days")
        if not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= 36500:
            raise FormatError(f"{at}: keep_days must be a whole number of days, 0 to 36500")
        rules.append(Rule(_strings(item, "kinds", at), _strings(item, "workflows", at), days))
    holds: list[Hold] = []
    for n, item in enumerate(_items(doc, "holds", where), start=1):
        at = f"{where}: holds[{n}]"
        if not isinstance(item, dict) or set(item) - {"instances", "reason"} \
                or "instances" not in item:
            raise FormatError(f"{at} must be an object of instances (and reason)")
        reason = item.get("reason", "legal hold")
        if not isinstance(reason, str) or not 0 < len(reason) <= 500:
            raise FormatError(f"{at}: reason must be text of 1 to 500 characters")
        holds.append(Hold(_strings(item, "instances", at), reason))
    return Policy(tuple(rules), tuple(holds), hashlib.sha256(data).hexdigest()[:16])


@dataclass
class Tally:
    """What one run did or found, per payload: erased now, erased already, kept (within
    its term or under no rule), held."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        (ERASED, ALREADY, KEPT, HELD), 0))
    held: dict[str, str] = field(default_factory=dict)
    """Instances on hold that had payloads due: instance -> the hold's reason."""
    erased: list[dict[str, Any]] = field(default_factory=list)
    unmatched_holds: list[dict[str, Any]] = field(default_factory=list)
    """The holds' names and patterns that match no instance (:meth:`Policy.unmatched_holds`)."""

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "held": dict(self.held), "erased": self.erased,
                "unmatched_holds": self.unmatched_holds}


def kept_payloads(entry: rec.Entry) -> Iterator[tuple[str, str]]:
    """(field, commitment) of each payload the entry signs as stored with it."""
    for name, ref in entry.data.items():
        if isinstance(ref, dict) and isinstance(ref.get("c"), str) and ref.get("k") is True:
            yield name, ref["c"]


def parsed_entries(ledger: Ledger, instance: str) -> list[rec.Entry]:
    """``instance``'s entries that parse, in stored order (the verifier reports the
    others; nothing of them is erased or reported here)."""
    entries: list[rec.Entry] = []
    for row in ledger.entries(instance):
        try:
            entries.append(rec.parse_entry(row.body))
        except HistauditError:
            continue
    return entries


def apply(ledger: Ledger, policy: Policy, *, signer: Signer | None, now: datetime,
          dry_run: bool = False) -> Tally:
    """Erase every stored payload past its term that no hold covers (module docstring);
    ``dry_run`` (or no ``signer``) only counts. Each erasure passes the crash point
    ``retention:erased`` (a crash test cuts the run there)."""
    tally = Tally()
    summaries = ledger.instances()
    tally.unmatched_holds = policy.unmatched_holds(s.instance for s in summaries)
    for summary in summaries:
        instance = summary.instance
        entries = parsed_entries(ledger, instance)
        workflow = next((str(e.data.get("workflow", "")) for e in entries
                         if e.kind == Kind.WORKFLOW_STARTED), "")
        erased = {e.data.get("commitment") for e in entries if e.kind == Kind.PAYLOAD_ERASED}
        hold = policy.hold_for(instance)
        for entry in entries:
            for name, commitment in kept_payloads(entry):
                found = policy.rule_for(entry.kind, workflow)
                if found is None or parse_time(entry.ts) + timedelta(days=found[1].keep_days) \
                        > now:
                    tally.counts[KEPT] += 1
                elif commitment in erased:
                    tally.counts[ALREADY] += 1
                elif hold is not None:
                    tally.counts[HELD] += 1
                    tally.held[instance] = hold.reason
                else:
                    n, rule = found
                    done = {"instance": instance, "entry": entry.seq, "field": name,
                            "kind": entry.kind, "rule": n, "keep_days": rule.keep_days}
                    if not dry_run and signer is not None:
                        _, record = erase_payload(ledger, instance, commitment, signer=signer,
                                                  record={"entry": entry.seq, "field": name,
                                                          "reason": _reason(policy, n, rule)})
                        done["erasure"] = record.seq
                        erased.add(commitment)
                        crash_point("retention:erased")
                    tally.counts[ERASED] += 1
                    tally.erased.append(done)
    return tally


def _reason(policy: Policy, n: int, rule: Rule) -> str:
    return (f"retention: rule {n} of policy {policy.digest} keeps {', '.join(rule.kinds)} "
            f"payloads {rule.keep_days} days")


def check_now(text: str | None) -> datetime | None:
    """``--now`` as a datetime (None: the real clock); InputError when it does not read."""
    if text is None:
        return None
    try:
        return parse_time(text)
    except FormatError as exc:
        raise InputError(f"--now: {exc}") from None
