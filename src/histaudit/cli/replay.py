"""``histaudit replay``: today's workflow code over recorded histories."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from histaudit.errors import UsageError

from . import render
from .ledger import open_ledger
from .options import EXIT_BAD_INPUT, EXIT_CLEAN, EXIT_FINDINGS, Seconds, run_settings


@click.command("replay")
@click.argument("instance_ids", nargs=-1, metavar="[INSTANCE_ID]...")
@click.option("--workflow", "workflow_refs", required=True, multiple=True,
              metavar="MODULE:FUNCTION",
              help="The workflow code to replay (importable from the current directory, "
                   "or path/to/file.py:FUNCTION; a @wfr.workflow-decorated function, a plain "
                   "function or a WorkflowRuntime). Repeat it for histories of several "
                   "workflows.")
@click.option("--engine", "engine_addr", metavar="HOST:PORT",
              help="Fetch the histories from the engine (GetInstanceHistory).")
@click.option("--all", "all_", is_flag=True,
              help="Every instance the engine knows (ListInstanceIDs); needs --engine.")
@click.option("--tree", is_flag=True,
              help="Also every child workflow below each INSTANCE_ID, as the ledger's "
                   "signed workflow.scheduled_child entries name them; needs --engine and "
                   "a ledger (--db).")
@click.option("--history", "history_path", metavar="FILE|DIR",
              help="Read a saved history file, or every *.json history in a directory.")
@click.option("--save", "save_file", metavar="FILE",
              help="Also save the history to FILE (one history only).")
@click.option("--db", "db", metavar="URL",
              help="Ledger URL: compare the replayed output (and activity results) with the "
                   "signed ones (default $HISTAUDIT_DB when set; without one, not compared).")
@click.option("--keep-going", is_flag=True,
              help="Replay every history, not only up to the first failure.")
@click.option("--timeout", type=Seconds(0.1, 3600), default=10.0, show_default=True,
              help="Seconds to wait for the engine.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one object for one history; {ok, results, summary} for more.")
def replay(instance_ids: tuple[str, ...], workflow_refs: tuple[str, ...],
           engine_addr: str | None, all_: bool, tree: bool, history_path: str | None,
           save_file: str | None, db: str | None, keep_going: bool, timeout: float,
           as_json: bool) -> int:
    """Replay recorded histories against workflow code; exit 1 if one diverges or replays
    to another output than was signed, 2 if one cannot be replayed."""
    from histaudit.replay import (
        NOT_COMPARED,
        History,
        engine_instance_ids,
        history_files,
        load_workflows,
    )
    from histaudit.replay import replay_many as run_many

    if bool(engine_addr) == bool(history_path):
        raise UsageError("give the history source: --engine HOST:PORT or --history FILE")
    if all_ and not engine_addr:
        raise UsageError("--all lists the engine's instances: give --engine HOST:PORT "
                         "(for saved histories, give --history DIRECTORY)")
    if all_ and instance_ids:
        raise UsageError("give instance ids or --all, not both")
    if engine_addr and not (instance_ids or all_):
        raise UsageError("give the instances to fetch: INSTANCE_ID... or --all")
    db = db or run_settings().db
    if tree and not (engine_addr and instance_ids and db):
        raise UsageError("--tree replays INSTANCE_ID's children from the engine, as the "
                         "ledger names them: give INSTANCE_ID..., --engine and --db")
    if tree:
        instance_ids = _trees(str(db), instance_ids)
    directory = bool(history_path) and Path(str(history_path)).is_dir()
    if (history_path and len(instance_ids) > 1) or (directory and instance_ids):
        raise UsageError("--history names the histories itself: give at most one "
                         "INSTANCE_ID, with a FILE")

    logging.getLogger("WorkflowRuntime").setLevel(logging.CRITICAL)  # the SDK's chatter
    with _sidecar(engine_addr, timeout):
        workflow = load_workflows(workflow_refs)
    sources: list[tuple[str, Callable[[], History]]]
    if engine_addr:
        address = engine_addr
        ids = list(instance_ids) or engine_instance_ids(address, timeout=timeout)
        sources = [(i, functools.partial(History.fetch, address, i, timeout=timeout))
                   for i in ids]
    elif directory:
        sources = [(str(p), functools.partial(History.load, p))
                   for p in history_files(str(history_path))]
    else:
        sources = [(str(history_path), functools.partial(History.load, str(history_path)))]
    single = len(sources) == 1 and not all_ and not directory and not tree
    if save_file and not single:
        raise UsageError("--save writes one history: give one INSTANCE_ID or --history FILE")

    with _ledger(db, workflow) as compare:
        if single:
            return _one(sources[0], workflow, instance_ids[0] if instance_ids else None,
                        save_file, compare, as_json)
        batch = run_many(sources, workflow, keep_going=keep_going, compare=compare)
    if as_json:
        render.emit_json(batch.to_json())
    else:
        for item in batch.items:
            _echo(item.explain())
        _echo(batch.summary())
        if compare is None:
            _echo(NOT_COMPARED.message)
    if any(item.result is None for item in batch.items):
        return EXIT_BAD_INPUT
    return EXIT_CLEAN if batch else EXIT_FINDINGS


def _one(source: tuple[str, Callable[[], Any]], workflow: Any, instance_id: str | None,
         save_file: str | None, compare: Any, as_json: bool) -> int:
    """One history: the errors it cannot be replayed for go to the CLI's error boundary."""
    from histaudit.replay import NOT_COMPARED, ReplayItem
    from histaudit.replay import replay as run_replay

    history = source[1]()
    result = run_replay(history, workflow, instance_id)
    if save_file:
        history.save(save_file)
    item = ReplayItem(source[0], result, NOT_COMPARED if compare is None
                      else compare(result, history))
    if as_json:
        render.emit_json(item.to_json())
    else:
        _echo(item.explain())
        if compare is None:
            _echo(NOT_COMPARED.message)
    return EXIT_CLEAN if item else EXIT_FINDINGS


def _trees(url: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    """Each root and the instances below it the ledger recorded, depth first, once."""
    from histaudit.verify.tree import instance_tree

    with open_ledger(url, reading=True) as ledger:
        found = [n.instance for root in roots for n in instance_tree(root, ledger.entries)
                 if n.state != "not-recorded" or n.instance == root]
    return tuple(dict.fromkeys(found))


SIDECAR_VARIABLES = ("DAPR_GRPC_ENDPOINT", "DAPR_RUNTIME_HOST", "DAPR_GRPC_PORT",
                     "DAPR_HTTP_ENDPOINT", "DAPR_HTTP_PORT")
"""What the Dapr SDK's clients read to find their sidecar (``dapr.conf``'s settings)."""


@contextlib.contextmanager
def _sidecar(address: str | None, timeout: float) -> Iterator[None]:
    """With ``--engine`` and none of :data:`SIDECAR_VARIABLES` set (an empty one is unset,
    as for the SDK), the user's module is imported with the engine as its sidecar, so one
    that connects at import (a dapr-agents agent asks daprd for its metadata) finds it:
    ``DAPR_GRPC_ENDPOINT`` in the environment and :func:`histaudit.sdk.sidecar_at`. Set
    ones are the user's: left as they are."""
    if not address or any(os.environ.get(name) for name in SIDECAR_VARIABLES):
        yield
        return
    from histaudit import sdk

    before = os.environ.get("DAPR_GRPC_ENDPOINT")
    os.environ["DAPR_GRPC_ENDPOINT"] = address
    try:
        with sdk.sidecar_at(address, timeout=timeout):
            yield
    finally:
        if before is None:
            os.environ.pop("DAPR_GRPC_ENDPOINT", None)
        else:
            os.environ["DAPR_GRPC_ENDPOINT"] = before


def _echo(text: str) -> None:
    """``text``, line by line, with what a history file could smuggle in escaped."""
    click.echo("\n".join(render.escape(line) for line in text.splitlines()))


@contextlib.contextmanager
def _ledger(url: str | None, workflow: Any) -> Iterator[Any]:
    """The signed-output comparison against the ledger at ``url`` (earlier generations
    replayed against ``workflow``); None without one."""
    if not url:
        yield None
        return
    from histaudit.replay.signed import against

    with open_ledger(url, reading=True) as ledger:
        yield against(ledger, workflow)
