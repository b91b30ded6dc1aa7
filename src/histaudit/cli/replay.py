"""``histaudit replay``: today's workflow code over a recorded history."""

from __future__ import annotations

import logging

import click

from histaudit.errors import UsageError

from . import render
from .options import EXIT_CLEAN, EXIT_FINDINGS


@click.command("replay")
@click.argument("instance_id")
@click.option("--workflow", "workflow_ref", required=True, metavar="MODULE:FUNCTION",
              help="The workflow code to replay (importable from the current directory, "
                   "or path/to/file.py:FUNCTION; a @wfr.workflow-decorated function, a plain "
                   "function or a WorkflowRuntime).")
@click.option("--engine", "engine_addr", metavar="HOST:PORT",
              help="Fetch the history from the engine (GetInstanceHistory).")
@click.option("--history", "history_file", metavar="FILE", help="Read a saved history file.")
@click.option("--save", "save_file", metavar="FILE", help="Also save the history to FILE.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True,
              help="Seconds to wait for the engine.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def replay(instance_id: str, workflow_ref: str, engine_addr: str | None,
           history_file: str | None, save_file: str | None, timeout: float,
           as_json: bool) -> int:
    """Replay INSTANCE_ID's recorded history against workflow code; exit 1 if it diverges."""
    if bool(engine_addr) == bool(history_file):
        raise UsageError("give the history source: --engine HOST:PORT or --history FILE")
    from histaudit.replay import History, load_workflow
    from histaudit.replay import replay as run_replay

    logging.getLogger("WorkflowRuntime").setLevel(logging.CRITICAL)  # the SDK's chatter
    workflow = load_workflow(workflow_ref)
    history = (History.fetch(engine_addr, instance_id, timeout=timeout) if engine_addr
               else History.load(str(history_file)))
    result = run_replay(history, workflow, instance_id)
    if save_file:
        history.save(save_file)
    if as_json:
        render.emit_json(result.to_json())
    else:
        click.echo(result.explain())
    return EXIT_CLEAN if result.ok else EXIT_FINDINGS
