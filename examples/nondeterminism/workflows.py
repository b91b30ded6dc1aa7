"""The workflows the golden histories were recorded with (``tests/golden/record_histories.py``).

* ``order`` — deterministic: three activities, and the only clock it reads is the
  workflow's own (``ctx.current_utc_datetime``, which replays as recorded).
* ``approval`` — deterministic, and waits for an external event between two activities
  (the live replay check in ``tests/integration/test_replay.py`` crashes it there).
* ``wall_clock`` — NOT deterministic: branches on ``datetime.now()``. Recorded before its
  deadline it took the fast path; replayed after it, the code takes the slow path.
* ``dice`` — NOT deterministic: draws a random number in the workflow body, branches on
  it and passes it to its activities.
* ``refund`` — deterministic, and patched: ``ctx.is_patched("refund-v2")`` chooses the new
  refund rule for runs started after the patch shipped (the ledger signs which one,
  ``workflow.patch``); ``v2.refund_unpatched`` is that code with the patch taken out.

Activities are plain functions; the app registers them (``register(runtime)``). Only their
names matter to a replay, so replaying needs none of them to run.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

import dapr.ext.workflow as wf

Ctx = wf.DaprWorkflowContext
Act = wf.WorkflowActivityContext


# --- activities ------------------------------------------------------------------------

def reserve(ctx: Act, order: dict[str, Any]) -> dict[str, Any]:
    return {"order": order["id"], "items": order["items"]}


def charge(ctx: Act, req: dict[str, Any]) -> str:
    return f"charged {req['amount']} for order {req['order']}"


def authorize(ctx: Act, req: dict[str, Any]) -> str:  # used only by v2 code
    return f"authorized {req['amount']}"


def ship(ctx: Act, order_id: str) -> str:
    return f"tracking-{order_id}"


def quote(ctx: Act, item: str) -> dict[str, Any]:
    return {"item": item, "price": 42}


def book(ctx: Act, req: dict[str, Any]) -> str:
    return f"booked {req['item']} at {req['price']}"


def fast_path(ctx: Act, req: dict[str, Any]) -> str:
    return "fast"


def slow_path(ctx: Act, req: dict[str, Any]) -> str:
    return "slow"


def roll(ctx: Act, n: int) -> int:
    return n % 6 + 1


def refund_rule_v1(ctx: Act, req: dict[str, Any]) -> int:
    return int(req["amount"]) // 2


def refund_rule_v2(ctx: Act, req: dict[str, Any]) -> int:
    return int(req["amount"])


def bonus(ctx: Act, req: dict[str, Any]) -> str:
    return f"{req['parity']} bonus"


ACTIVITIES = (reserve, charge, authorize, ship, quote, book, fast_path, slow_path, roll, bonus,
              refund_rule_v1, refund_rule_v2)


# --- workflows -------------------------------------------------------------------------

def order(ctx: Ctx, order: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """Deterministic: the same history replays to the same steps and result, always."""
    reservation = yield ctx.call_activity(reserve, input=order)
    receipt = yield ctx.call_activity(charge, input={"order": order["id"],
                                                     "amount": order["amount"]})
    tracking = yield ctx.call_activity(ship, input=order["id"])
    return {"order": order["id"], "items": reservation["items"], "receipt": receipt,
            "tracking": tracking, "at": ctx.current_utc_datetime.isoformat()}


def approval(ctx: Ctx, item: str) -> Generator[Any, Any, str]:
    """Deterministic; waits for an ``approve`` event between its two activities."""
    offer = yield ctx.call_activity(quote, input=item)
    approved = yield ctx.wait_for_external_event("approve")
    if not approved:
        return "declined"
    return (yield ctx.call_activity(book, input=offer))


def wall_clock(ctx: Ctx, req: dict[str, Any]) -> Generator[Any, Any, str]:
    """NOT deterministic: reads the machine's clock (use ``ctx.current_utc_datetime``)."""
    deadline = datetime.fromisoformat(req["deadline"])
    if datetime.now(UTC) < deadline:  # wrong on replay: the clock has moved on
        return (yield ctx.call_activity(fast_path, input=req))
    return (yield ctx.call_activity(slow_path, input=req))


def dice(ctx: Ctx, _: Any = None) -> Generator[Any, Any, list[Any]]:
    """NOT deterministic: a random number drawn in the workflow body, not in an activity.

    Every replay draws another number, so the inputs differ from the recorded ones, yet
    the steps stay the same: the SDK replays it without complaint and the running
    workflow completes. Only a replay that compares inputs notices. (Had the random
    number decided *which* activity to call, a live replay could also stall: dapr 1.19's
    executor fails to describe that mismatch and returns no action at all.)
    """
    n = random.randrange(1 << 62)  # a new number on every replay
    face = yield ctx.call_activity(roll, input=n)
    parity = "odd" if n % 2 else "even"  # the branch: decided by the random number
    extra = yield ctx.call_activity(bonus, input={"n": n, "parity": parity})
    return [face, extra]


def refund(ctx: Ctx, req: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """Deterministic and patched: a run that asked after the patch shipped takes the new
    rule, and every replay of it does too (the SDK answers from the history)."""
    rule = refund_rule_v2 if ctx.is_patched("refund-v2") else refund_rule_v1
    amount = yield ctx.call_activity(rule, input=req)
    return {"refund": amount, "rule": rule.__name__}


def billing_v1(ctx: Ctx, req: dict[str, Any]) -> Generator[Any, Any, int]:
    """Version ``billing_v1`` of the versioned workflow ``billing``."""
    return (yield ctx.call_activity(refund_rule_v1, input=req))


def billing_v2(ctx: Ctx, req: dict[str, Any]) -> Generator[Any, Any, int]:
    """Version ``billing_v2`` (the latest) of ``billing``, itself patched."""
    rule = refund_rule_v2 if ctx.is_patched("fee-waiver") else refund_rule_v1
    return (yield ctx.call_activity(rule, input=req))


WORKFLOWS = (order, approval, wall_clock, dice, refund)
VERSIONED = {"billing": ((billing_v1, False), (billing_v2, True))}
"""Versioned workflows: name -> (version function, is latest), oldest first."""


def register(runtime: Any) -> None:
    """Register every workflow and activity here with a (possibly audited) runtime."""
    for fn in WORKFLOWS:
        runtime.register_workflow(fn)
    for name, versions in VERSIONED.items():
        for fn, latest in versions:
            runtime.register_versioned_workflow(fn, name=name, version_name=fn.__name__,
                                                is_latest=latest)
    for fn in ACTIVITIES:
        runtime.register_activity(fn)
