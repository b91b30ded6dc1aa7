"""Headless Chromium, driven with its own flags, for the HTML pages histaudit writes (the
bundle's report, the period report): ``--dump-dom`` gives the DOM it built."""

from __future__ import annotations

import os
import shutil
import subprocess
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


