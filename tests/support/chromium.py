"""Headless Chromium, driven with its own flags, for the HTML pages histaudit writes (the
bundle's report, the period report, ``show --html``): ``--dump-dom`` gives the DOM it
built, :class:`Dom` parses it back into a tree, :func:`console_problems` picks out what
its console said about a blocked resource or a policy violation."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_TIMEOUT_S = 120


def chromium_binary() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")
    if not found:
        pytest.fail("headless Chromium is needed for the report tests: run "
                    "scripts/ensure-chromium.sh (Debian's chromium package)", pytrace=False)
    return found


def chromium(page: Path, *flags: str, profile: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on ``page`` with ``flags``; its own profile dir, so parallel
    test workers never share one; root needs ``--no-sandbox``."""
    argv = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", *flags,
            page.resolve().as_uri()]
    r = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                       timeout=CHROMIUM_TIMEOUT_S, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def console_problems(stderr: str) -> list[str]:
    """Console lines about a blocked resource or a policy violation."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line
            or "Content Security Policy" in line or "Refused to" in line]


# --- the DOM Chromium built -------------------------------------------------------------

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
         "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    order: int
    parent: Node | None
    children: list[Node] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.classes):
                found.append(child)
            found.extend(child.find(tag, cls))
        return found


class Dom(HTMLParser):
    """The serialized DOM parsed back into a tree (text gathered per element)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, 0, None)
        self.all: list[Node] = []
        self._open = [self.root]
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, len(self.all) + 1, self._open[-1])
        self._open[-1].children.append(node)
        self.all.append(node)
        if tag not in _VOID:
            self._open.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, 0, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        for node in self._open:
            node.texts.append(data)

    def by_id(self) -> dict[str, Node]:
        return {n.attrs["id"]: n for n in self.all if "id" in n.attrs}
