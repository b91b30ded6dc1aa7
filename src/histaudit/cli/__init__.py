"""The ``histaudit`` command: parse, call the library, render. No logic lives only here.

Each command is a function in its own module that returns an exit status; :func:`main`
is the one error boundary, turning every library error into one line on stderr and exit
status 2. Findings exit 1; a clean result exits 0. Command modules import the heavy
parts (the store, the Dapr SDK) inside the command, so ``verify --bundle`` loads neither.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from histaudit import __version__
from histaudit.errors import HistauditError

from .crashtest import crashtest
from .keys import keys
from .ledger import checkpoint, export, list_, redact, show
from .options import EXIT_BAD_INPUT, EXIT_CLEAN, EXIT_FINDINGS
from .replay import replay
from .verify import verify

__all__ = ["EXIT_BAD_INPUT", "EXIT_CLEAN", "EXIT_FINDINGS", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="histaudit")
def cli() -> None:
    """Signed, hash-chained audit ledger for Dapr Workflow, and its verifier."""


for command in (keys, verify, export, checkpoint, list_, show, redact, replay, crashtest):
    cli.add_command(command)


def _fail(message: str) -> NoReturn:
    """Print ``message`` as exactly one line (newlines in paths or URLs escaped); exit 2."""
    one_line = message.replace("\r", "\\r").replace("\n", "\\n")
    click.echo(f"histaudit: error: {one_line}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the CLI with one error boundary: library errors become one line and exit 2."""
    try:
        rv = cli.main(args=argv, prog_name="histaudit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.exceptions.Abort:
        click.echo("histaudit: aborted", err=True)
        sys.exit(130)
    except HistauditError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    sys.exit(rv if isinstance(rv, int) else EXIT_CLEAN)
