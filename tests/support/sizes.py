"""Two sizes for the tests whose point a small case proves: ``make test`` runs the short
one, ``make test-long`` (``HISTAUDIT_TEST_SIZE=long``) the exhaustive one.

A test that takes its size from :func:`sized` says in its docstring what the short size
still proves and carries ``pytest.mark.sized``; the Makefile's test-long target runs the
tests so marked.
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["LONG", "sized"]

T = TypeVar("T")

LONG = os.environ.get("HISTAUDIT_TEST_SIZE", "short") == "long"
"""True under ``make test-long``."""


def sized(short: T, long: T) -> T:
    """``short`` in ``make test``, ``long`` in ``make test-long``."""
    return long if LONG else short
