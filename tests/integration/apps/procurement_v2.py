"""``monitor`` of apps/procurement_app.py with one change that only generation 0 makes:
its first delivery check asks with another input. ``histaudit replay`` of the monitor
instance must catch it, though the engine keeps only generation 3's history."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

GENERATIONS = 3


def monitor(ctx: Any, check: int) -> Generator[Any, Any, Any]:
    status = yield ctx.call_activity("check_delivery", input=check if check else -1)
    if check < GENERATIONS:
        ctx.continue_as_new(check + 1)
        return None
    return status
