"""The period report an auditor reads: what the ledger recorded, kept, erased, held,
verified and had witnessed between two times (issue #42, item 3).

:func:`build` verifies every chain of the ledger as ``verify --all --full`` does (every
signature, every stored payload, the leaf index), since a period's entries are only as
good as the chain they hang from, and fails where it fails: a chain that does not verify
is in the report whatever its rows say of their time — none of them may parse (issue
#50). For each instance with entries in the period, or failing, it:

* says whether its chain verified, and the codes of its findings;
* counts its entries in the period, its workflow and end state (the fold ``verify
  --tree`` uses), its payloads still stored, and those erased in the period with the
  reason signed in each ``payload.erased`` (a retention rule, a privacy request);
* says which instances a retention policy's holds cover (and names each hold id or
  pattern that covers none);
* lists the checkpoints stored in the period (by their note's timestamp-free size: those
  covering the period's last entry and later) with the witness cosignatures that count.

:func:`render_html` writes it as one self-contained page (every value escaped, no
script). The mapping to the texts it serves (EU AI Act Art. 12, 19, 26(6); ISO/IEC 42001
A.6.2.8) says which figure bears on which obligation; it is a reading aid, not a legal
opinion.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from histaudit.errors import HistauditError
from histaudit.ledger import records as rec
from histaudit.ledger.checkpoint import with_lines
from histaudit.ledger.keys import TrustStore, parse_time
from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import StoredEntry
from histaudit.ledger.retention import Policy, kept_payloads
from histaudit.ledger.store import Ledger
from histaudit.verify.findings import Severity
from histaudit.verify.report import Scope
from histaudit.verify.tree import WorkflowSummary
from histaudit.verify.verifier import verify_all
from histaudit.version import __version__
from histaudit.witness.policy import WitnessPolicy, counted_cosignatures

__all__ = ["MAPPING", "REPORT_VERSION", "build", "render_html"]

REPORT_VERSION = 1
MAPPING = (
    ("EU AI Act Art. 12 (record-keeping)",
     "events recorded automatically over the system's lifetime: entries, instances, chain "
     "verification"),
    ("EU AI Act Art. 19 and 26(6) (logs kept at least six months)",
     "entries are kept for good; payloads erased in the period and the rule that erased "
     "them; holds"),
    ("ISO/IEC 42001 A.6.2.8 (AI system recording of event logs)",
     "entries, verification, checkpoints and their witness cosignatures"),
)


def build(ledger: Ledger, *, since: datetime, until: datetime, trust: TrustStore,
          retention: Policy | None = None,
          witnesses: WitnessPolicy | None = None) -> dict[str, Any]:
    """The report of the period [``since``, ``until``] (module docstring)."""
    instances: list[dict[str, Any]] = []
    totals = {"instances": 0, "entries": 0, "payloads_stored": 0, "payloads_erased": 0,
              "instances_verified": 0, "instances_failing": 0, "instances_held": 0}
    ledger_findings: list[str] = []
    last_leaf = -1
    # Every chain of the ledger, as `verify --all --full` verifies it (issue #50): the
    # rows that do not parse are what a failing chain is made of, so the report is built
    # from the verifier's reports, never only from the entries that parse.
    for report in verify_all(ledger, trust=trust, full=True):
        if report.scope is not Scope.INSTANCE:
            ledger_findings += sorted(f.code for f in report.failing(Severity.ERROR))
            continue
        instance = report.instance_id
        rows = list(ledger.entries(instance))
        entries = [e for e in map(_parsed, rows) if e is not None]
        within = [e for e in entries if since <= parse_time(e.ts) <= until]
        if not within and report.ok:
            continue  # a chain that verifies, with nothing in the period
        if within:
            last_leaf = max(last_leaf, max(e.leaf for e in within))
        fold = WorkflowSummary()
        for e in entries:
            fold.add(e.seq, e.kind, e.data)
        stored = sum(1 for e in entries for _, c in kept_payloads(e)
                     if ledger.payload(c) is not None)
        erased = [{"entry": e.data.get("entry"), "field": e.data.get("field"),
                   "reason": e.data.get("reason"), "at": e.ts}
                  for e in within if e.kind == Kind.PAYLOAD_ERASED]
        hold = retention.hold_for(instance) if retention is not None else None
        instances.append({
            "instance": instance, "workflow": fold.workflow, "state": fold.state,
            "entries_in_period": len(within), "entries": len(rows),
            "verified": report.ok, "findings": sorted(report.codes()),
            "payloads_stored": stored, "payloads_erased_in_period": erased,
            "hold": None if hold is None else hold.reason})
        totals["instances"] += 1
        totals["entries"] += len(within)
        totals["payloads_stored"] += stored
        totals["payloads_erased"] += len(erased)
        totals["instances_verified" if report.ok else "instances_failing"] += 1
        totals["instances_held"] += hold is not None
    cosigs = ledger.cosignatures()
    checkpoints = []
    for size, note in ledger.checkpoint_notes():
        if size <= last_leaf:
            continue  # does not cover the period's last entry
        counted = counted_cosignatures(((w, kh, line) for s, w, kh, line in cosigs
                                        if s == size), note, witnesses)
        quorum = None
        if witnesses is not None:
            quorum = witnesses.judge(with_lines(note, list(counted.lines))).satisfied
        checkpoints.append({"size": size, "cosignatures": len(counted.lines),
                            "quorum_met": quorum})
    return {"version": REPORT_VERSION, "histaudit": __version__,
            "period": {"since": since.isoformat(), "until": until.isoformat()},
            "retention_policy": None if retention is None else retention.digest,
            "unmatched_holds": [] if retention is None else retention.unmatched_holds(
                s.instance for s in ledger.instances()),
            "totals": totals, "instances": instances, "ledger_findings": ledger_findings,
            "checkpoints_covering_period": checkpoints,
            "mapping": [{"text": t, "evidence": e} for t, e in MAPPING]}


def _parsed(row: StoredEntry) -> rec.Entry | None:
    """The entry of ``row`` when it parses and its time reads; None for the rest, which
    its chain's verification reports."""
    try:
        entry = rec.parse_entry(row.body)
        parse_time(entry.ts)
    except HistauditError:
        return None
    return entry


def render_html(doc: dict[str, Any]) -> str:
    """One self-contained page of ``doc`` (every value escaped; no script)."""
    def esc(v: Any) -> str:
        return html.escape("-" if v is None else str(v))

    t, p = doc["totals"], doc["period"]
    rows = "".join(
        f"<tr><td>{esc(i['instance'])}</td><td>{esc(i['workflow'])}</td>"
        f"<td>{esc(i['state'])}</td><td>{i['entries_in_period']}</td>"
        f"<td>{'verified' if i['verified'] else 'FAILED: ' + esc(', '.join(i['findings']))}"
        f"</td><td>{i['payloads_stored']}</td><td>{len(i['payloads_erased_in_period'])}</td>"
        f"<td>{esc(i['hold'])}</td></tr>" for i in doc["instances"])
    erasures = "".join(
        f"<li>{esc(i['instance'])} entry {esc(e['entry'])} {esc(e['field'])} at "
        f"{esc(e['at'])}: {esc(e['reason'])}</li>"
        for i in doc["instances"] for e in i["payloads_erased_in_period"])
    quorum = {None: "", True: ", quorum met", False: ", quorum NOT met"}
    checkpoints = "".join(
        f"<li>checkpoint of {c['size']} leaves: {c['cosignatures']} cosignature(s)"
        f"{quorum[c['quorum_met']]}</li>"
        for c in doc["checkpoints_covering_period"]) or "<li>none</li>"
    ledger = (f"; the ledger as a whole FAILED: {esc(', '.join(doc['ledger_findings']))}"
              if doc["ledger_findings"] else "")
    unmatched = "".join(
        f"<p class=\"unmatched\">Hold {h['hold']} ({esc(h['reason'])}) matches no instance: "
        f"{esc(', '.join(h['instances']))}</p>" for h in doc["unmatched_holds"])
    mapping = "".join(f"<tr><td>{esc(m['text'])}</td><td>{esc(m['evidence'])}</td></tr>"
                      for m in doc["mapping"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>histaudit period report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #999;padding:4px 8px;text-align:left}}</style></head><body>
<h1>Audit ledger report, {esc(p['since'])} to {esc(p['until'])}</h1>
<p id="totals">{t['instances']} instance(s), {t['entries']} entries in the period;
{t['instances_verified']} verified, {t['instances_failing']} failing{ledger};
{t['payloads_stored']} payload(s) stored, {t['payloads_erased']} erased in the period;
{t['instances_held']} instance(s) on hold. Retention policy {esc(doc['retention_policy'])}.</p>
<h2>Instances</h2><table><tr><th>instance</th><th>workflow</th><th>state</th>
<th>entries in period</th><th>chain</th><th>payloads stored</th><th>erased in period</th>
<th>hold</th></tr>{rows}</table>
{unmatched}<h2>Erasures</h2><ul id="erasures">{erasures or '<li>none</li>'}</ul>
<h2>Checkpoints covering the period</h2><ul>{checkpoints}</ul>
<h2>What bears on which obligation</h2><p>A reading aid, not a legal opinion.</p>
<table>{mapping}</table>
<p>histaudit {esc(doc['histaudit'])}, report format {doc['version']}.</p>
</body></html>
"""
