"""docs/cli.md is what the commands' own --help prints (scripts/cli_doc.py writes it).
Cost: under 1 s."""

from __future__ import annotations

import runpy

from support.repo import REPO


def test_the_cli_reference_is_generated_from_the_commands() -> None:
    tool = runpy.run_path(str(REPO / "scripts" / "cli_doc.py"))
    text = tool["render"]()
    assert (REPO / "docs" / "cli.md").read_text(encoding="utf-8") == text, \
        "docs/cli.md is out of date: run .venv/bin/python scripts/cli_doc.py"
    # every command is in it, subcommands included
    for command in ("verify", "export", "prove", "checkpoint cosign", "keys export-public",
                    "retention apply", "crashtest", "dapr-capture"):
        assert f"## `histaudit {command}`" in text, command
