"""The ``histaudit`` command: parse, call the library, render. No logic lives only here.

Each command is a function in its own module that returns an exit status; :func:`main`
is the one error boundary, turning every library error into one line on stderr: exit
status 1 for a verification that failed outright (:class:`VerificationError`, such as a
bundle not signed by a trusted key), 2 for input that cannot be read or used. Findings
exit 1; a clean result exits 0 (README, "Exit status"). Command modules import the heavy
parts (the store, the Dapr SDK) inside the command, so ``verify --bundle`` loads neither.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from histaudit.errors import HistauditError, VerificationError
from histaudit.version import __version__

from .checkpoint import checkpoint
from .crashtest import crashtest
from .dapr_capture import dapr_capture
from .dapr_verify import dapr_verify
from .keys import keys
from .ledger import export, list_, redact
from .options import EXIT_BAD_INPUT, EXIT_CLEAN, EXIT_FINDINGS
from .prove import prove
from .replay import replay
from .report import report
from .retention import retention
from .show import show
from .verify import verify

__all__ = ["EXIT_BAD_INPUT", "EXIT_CLEAN", "EXIT_FINDINGS", "cli", "main"]


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: histaudit's version and the Dapr workflow SDK it runs on."""
    if not value or ctx.resilient_parsing:
        return
    try:
        from histaudit import sdk  # loads the SDK: only when asked

        layout = sdk.layout()
    except HistauditError as exc:
        layout = f"not usable: {exc}"
    click.echo(f"histaudit {__version__}, Dapr workflow SDK: {layout}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and the Dapr SDK layout.")
def cli() -> None:
    """Signed, hash-chained audit ledger for Dapr Workflow, and its verifier."""


for command in (keys, verify, export, prove, checkpoint, list_, show, redact, retention,
                report, replay, crashtest, dapr_verify, dapr_capture):
    cli.add_command(command)


def _fail(message: str, *, status: int = EXIT_BAD_INPUT, what: str = "error") -> NoReturn:
    """Print ``message`` as exactly one line (newlines in paths or URLs escaped); exit
    ``status`` (2: bad input; 1: ``what`` is "verification failed")."""
    one_line = message.replace("\r", "\\r").replace("\n", "\\n")
    click.echo(f"histaudit: {what}: {one_line}", err=True)
    sys.exit(status)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the CLI with one error boundary: library errors become one line; exit 1 when
    a verification failed, 2 when the input could not be read or used."""
    try:
        rv = cli.main(args=argv, prog_name="histaudit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.exceptions.Abort:
        click.echo("histaudit: aborted", err=True)
        sys.exit(130)
    except VerificationError as exc:
        _fail(str(exc), status=EXIT_FINDINGS, what="verification failed")
    except HistauditError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    sys.exit(rv if isinstance(rv, int) else EXIT_CLEAN)
