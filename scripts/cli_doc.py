"""Write docs/cli.md, the CLI reference, from the click commands themselves.

    .venv/bin/python scripts/cli_doc.py          # rewrite docs/cli.md
    .venv/bin/python scripts/cli_doc.py --check  # exit 1 if docs/cli.md is out of date

Every command and subcommand gets its usage, description and options exactly as
``--help`` prints them at 100 columns; tests/unit/cli/test_cli_doc.py keeps the file
equal to what this writes, so the reference cannot drift from the code.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "cli.md"
WIDTH = 100

HEADER = """\
# histaudit command reference

Generated from the commands' own help by `scripts/cli_doc.py` (a test keeps it current):
what `histaudit COMMAND --help` prints. How the commands fit together, exit statuses,
`--json` contracts and the environment variables are in the [user guide](guide.md).
"""


def _walk(command: click.Command, path: list[str], parent: click.Context | None
          ) -> Iterator[tuple[list[str], click.Context]]:
    settings = {**command.context_settings, "terminal_width": WIDTH,
                "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    yield path, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name], ctx)


def render() -> str:
    from histaudit.cli import cli

    out = [HEADER]
    entries = list(_walk(cli, ["histaudit"], None))
    out.append("\n".join(f"- [`{' '.join(p)}`](#{'-'.join(p)})" for p, _ in entries[1:]))
    for path, ctx in entries:
        title = " ".join(path)
        out.append(f'<a id="{"-".join(path)}"></a>\n\n## `{title}`\n\n```text\n'
                   f"{ctx.get_help().rstrip()}\n```")
    return "\n\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(REPO)} is out of date: run python scripts/cli_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
