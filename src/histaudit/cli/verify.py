"""``histaudit verify``: an instance, the whole ledger, a checkpoint proof, or a bundle."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

import click

from histaudit.errors import UsageError
from histaudit.verify.findings import Severity
from histaudit.verify.report import Report
from histaudit.witness.policy import read_policy

from . import render
from .ledger import open_ledger
from .options import EXIT_CLEAN, EXIT_FINDINGS, db_option, read_file, trust_option, trust_store
from .progress import Meter

if TYPE_CHECKING:
    from histaudit.ledger.checkpoint import Checkpoint
    from histaudit.verification import KeptCheckpoint, Policy, Verdict
    from histaudit.verify.tree import TreeNode


@click.command()
@click.argument("instance_id", required=False)
@click.option("--all", "all_", is_flag=True, help="Verify every instance in the ledger.")
@click.option("--tree", is_flag=True,
              help="Verify INSTANCE_ID and every child workflow below it (each with all its "
                   "continue-as-new generations), as its signed workflow.scheduled_child "
                   "entries name them; the tree is printed first.")
@db_option
@trust_option
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: {ok, reports, since_checkpoint}.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error",
              show_default=True, help="Lowest severity that makes the exit status 1.")
@click.option("--full", is_flag=True, help="Also check every entry signature and payload.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes for --full signature checks (default: all cores).")
@click.option("--bundle", "bundle_path", metavar="DIR",
              help="Verify an exported bundle offline instead of a database.")
@click.option("--since-checkpoint", "since", metavar="FILE",
              help="Also prove the ledger (or the --bundle's signed tree) is an "
                   "append-only extension of this signed checkpoint (catches rollback, "
                   "fork, deleted instances).")
@click.option("--witness-policy", "policy_file", metavar="FILE",
              help="Also judge the checkpoint (--since-checkpoint's, or the --bundle's) by "
                   "this witness policy: its quorum must have cosigned it (docs/bundle.md "
                   "§4.4).")
@click.option("--engine", "engine_addr", metavar="HOST:PORT",
              help="Also cross-check INSTANCE_ID's activity completions against the "
                   "engine's own history (GetInstanceHistory).")
@click.option("--trust-anchors", "trust_anchors", metavar="CA.pem",
              help="With --bundle: check the bundle's Dapr signatures against these PEM "
                   "trust anchors (sentry's ca.crt) instead of the ones it carries.")
def verify(instance_id: str | None, all_: bool, tree: bool, db: str | None, trust: str | None,
           as_json: bool, fail_on: str, full: bool, workers: int | None,
           since: str | None, bundle_path: str | None, engine_addr: str | None,
           policy_file: str | None = None, trust_anchors: str | None = None) -> int:
    """Prove INSTANCE_ID's chain complete and untampered; report what happened across crashes."""
    if engine_addr and (not instance_id or all_ or bundle_path):
        raise UsageError("--engine cross-checks one instance (or --tree): give INSTANCE_ID, "
                         "without --all or --bundle")
    if tree and (not instance_id or all_ or bundle_path):
        raise UsageError("--tree starts from one instance: give INSTANCE_ID, without --all "
                         "or --bundle")
    if bundle_path:
        if instance_id or all_:
            raise UsageError("--bundle verifies the whole bundle; drop INSTANCE_ID and --all")
        return _verify_bundle(bundle_path, trust, as_json, fail_on, since, policy_file,
                              trust_anchors)
    if trust_anchors:
        raise UsageError("--trust-anchors pins the anchors of a bundle's Dapr rows: give "
                         "--bundle DIR (for a state store, use `histaudit dapr-verify`)")
    if instance_id and all_:
        raise UsageError("give INSTANCE_ID or --all, not both")
    if not (instance_id or all_ or since):
        raise UsageError("give INSTANCE_ID, --all or --since-checkpoint FILE")
    if policy_file and not since:
        raise UsageError("--witness-policy judges a checkpoint: give --since-checkpoint FILE "
                         "(or --bundle DIR)")
    # The ledger side loads the store (SQLAlchemy) only here: a bundle needs neither.
    from histaudit.verification import KeptCheckpoint, Verifier

    policy = _policy(trust, policy_file, fail_on)
    kept = (KeptCheckpoint.read(read_file(since, "checkpoint"), policy.trust, source=since)
            if since else None)
    with open_ledger(db, reading=True) as ledger:
        verifier = Verifier(ledger, policy, full=full, workers=workers, since=kept,
                            engine=engine_addr)
        suffix = " (full)" if full else ""
        if not (instance_id or all_):
            verdict = verifier.checkpoint()
        elif all_:
            with Meter("verifying" + suffix) as meter:
                if meter.enabled:
                    meter(0, sum(s.entries for s in ledger.instances()))
                verdict = verifier.all(advance=meter.advance)
        elif tree:
            assert instance_id is not None
            with Meter(f"verifying the tree of {render.clip(instance_id, 40)}") as meter:
                verdict = verifier.tree(instance_id, progress=meter.callback)
        else:
            assert instance_id is not None
            # A bar over the instance's entries, its total from the store's count (read
            # only when the bar is drawn).
            with Meter(f"verifying {render.clip(instance_id, 40)}{suffix}") as meter:
                size = None
                if meter.enabled:
                    size = next((s.entries for s in ledger.instances()
                                 if s.instance == instance_id), None)
                verdict = verifier.instance(instance_id, progress=meter.callback, total=size)
    return _show(verdict, as_json, old=kept, policy=policy)


def _since_json(old: Checkpoint | None, consistency: Report | None) -> dict[str, Any] | None:
    """The ``since_checkpoint`` member: null without --since-checkpoint, else the kept
    checkpoint and the proof's report (null when the proof could not be made)."""
    if old is None:
        return None
    return {"size": old.size, "origin": old.origin, "checked": consistency is not None,
            "report": None if consistency is None else consistency.to_json()}


def _tree_lines(nodes: list[TreeNode], reports: list[Report]) -> list[str]:
    """The tree, one instance a line, indented by depth, with its verdict."""
    lines = [f"tree of {render.clip(nodes[0].instance)}: {len(nodes)} instance(s)"]
    for node, report in zip(nodes, reports, strict=True):
        gens = f", {node.generations} generations" if node.generations > 1 else ""
        name = node.workflow or "?"
        stray = ("" if node.parent is None or node.signed_parent in (None, node.parent)
                 else f", but it signed parent {render.clip(node.signed_parent)}")
        rerun = ("" if node.rerun_of is None else f", rerun of "
                 f"{render.clip(node.rerun_of[0])} from event {node.rerun_of[1]}")
        lines.append(f"{'  ' * (node.depth + 1)}{render.clip(node.instance)}  "
                     f"{render.clip(name)} ({node.state}{gens}{stray}{rerun}) — "
                     f"{'OK' if report.ok else 'FAILED'}")
    return lines


def _policy(trust: str | None, policy_file: str | None, fail_on: str) -> Policy:
    """The flags' one Policy: the trust store, the witness policy, the failing severity."""
    from histaudit.verification import Policy

    return Policy(trust_store(trust), read_policy(policy_file) if policy_file else None,
                  Severity.parse(fail_on))


def _show(verdict: Verdict, as_json: bool, *, old: KeptCheckpoint | None,
          policy: Policy) -> int:
    """One shape for every variant (schemas/verify.output.schema.json): the reports of
    INSTANCE_ID, --tree or --all (none for --since-checkpoint alone), the proof apart,
    and with --tree the tree."""
    code = EXIT_CLEAN if policy.passes(verdict) else EXIT_FINDINGS
    if as_json:
        # "ok" is the exit status's verdict (issue #40): with --fail-on warning, a warning
        # makes it false, as it makes the exit status 1
        render.emit_json({"ok": policy.accepts(verdict),
                          "reports": [r.to_json() for r in verdict.reports],
                          "since_checkpoint": _since_json(
                              None if old is None else old.checkpoint, verdict.consistency),
                          "tree": None if verdict.tree is None
                          else [n.to_json() for n in verdict.tree]})
    else:
        if verdict.tree is not None:
            click.echo("\n".join(render.escape(line) for line in
                                 _tree_lines(list(verdict.tree), list(verdict.reports))))
        render.reports(verdict.every)
    return code


def _verify_bundle(path: str, trust: str | None, as_json: bool, fail_on: str,
                   since: str | None, policy_file: str | None = None,
                   trust_anchors: str | None = None) -> int:
    from histaudit.verification import KeptCheckpoint, Verifier
    from histaudit.verify.dapr_history import load_anchors

    policy = _policy(trust, policy_file, fail_on)
    anchors = (load_anchors(read_file(trust_anchors, "trust anchors"), trust_anchors)
               if trust_anchors else None)
    kept = (KeptCheckpoint.read(read_file(since, "checkpoint"), policy.trust, source=since)
            if since else None)
    with Meter(f"verifying bundle {render.clip(os.path.basename(path.rstrip('/')), 40)}"
               ) as meter:
        verdict = Verifier(None, policy, since=kept).bundle(path, anchors=anchors,
                                                             progress=meter.callback)
    assert verdict.checkpoint is not None
    if as_json:
        # the proof sits in since_checkpoint, as for a ledger
        # (schemas/verify-bundle.output.schema.json)
        render.emit_json({"bundle": path, "ok": policy.accepts(verdict),
                          "checkpoint": {"size": verdict.checkpoint.size,
                                         "origin": verdict.checkpoint.origin},
                          "reports": [r.to_json() for r in verdict.reports],
                          "spans": [dataclasses.asdict(s) for s in verdict.spans],
                          "since_checkpoint": _since_json(
                              None if kept is None else kept.checkpoint,
                              verdict.consistency)})
    else:
        render.reports(verdict.every)
        unproven = {(f.instance, f.seq) for r in verdict.reports for f in r.findings
                    if f.code == "span-unproven"}
        for s in verdict.spans:
            click.echo(f"span {s.span_id} {render.clip(s.name, 40)}: entry {s.seq} of "
                       f"{render.clip(s.instance, 60)}, leaf {s.leaf} — "
                       f"{'UNPROVEN' if (s.instance, s.seq) in unproven else 'proven'}")
    return EXIT_CLEAN if policy.passes(verdict) else EXIT_FINDINGS
