"""Later versions of ``order`` (workflows.py), as if the code changed after the history
was recorded. Each is registered under the same workflow name, ``order``, and replayed
against ``tests/golden/histories/order.json``; each shows one kind of divergence:

======================== ===================================================== =====================
function                 what changed                                          ``histaudit replay``
======================== ===================================================== =====================
``order_refactored``     variable names, a helper: same steps, same result     OK
``order_new_activity``   ``authorize`` instead of ``charge``                   different-activity
``order_new_input``      the amount in cents                                   different-input
``order_swapped``        charges before it reserves                            different-order
``order_new_result``     returns another result                                different-outcome
``order_timer_first``    waits on a timer before the first activity            nondeterminism-error
======================== ===================================================== =====================

When Dapr itself replays a workflow, the SDK notices three of these (another activity,
the swap, the timer); a changed input or a changed result replays silently.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import dapr.ext.workflow as wf

from .workflows import authorize, charge, refund_rule_v1, reserve, ship

Ctx = wf.DaprWorkflowContext


def _charge_request(order: dict[str, Any]) -> dict[str, Any]:
    return {"order": order["id"], "amount": order["amount"]}


@wf.alternate_name("order")
def order_refactored(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    held = yield ctx.call_activity(reserve, input=o)
    paid = yield ctx.call_activity(charge, input=_charge_request(o))
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "at": ctx.current_utc_datetime.isoformat()}


@wf.alternate_name("order")
def order_new_activity(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    held = yield ctx.call_activity(reserve, input=o)
    paid = yield ctx.call_activity(authorize, input=_charge_request(o))
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "at": ctx.current_utc_datetime.isoformat()}


@wf.alternate_name("order")
def order_new_input(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    held = yield ctx.call_activity(reserve, input=o)
    paid = yield ctx.call_activity(charge, input={"order": o["id"],
                                                  "amount": o["amount"] * 100})  # cents now
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "at": ctx.current_utc_datetime.isoformat()}


@wf.alternate_name("order")
def order_swapped(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    paid = yield ctx.call_activity(charge, input=_charge_request(o))  # pay first now
    held = yield ctx.call_activity(reserve, input=o)
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "at": ctx.current_utc_datetime.isoformat()}


@wf.alternate_name("order")
def order_new_result(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    held = yield ctx.call_activity(reserve, input=o)
    paid = yield ctx.call_activity(charge, input=_charge_request(o))
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "status": "shipped"}  # no "at" any more, a "status" instead


@wf.alternate_name("order")
def order_timer_first(ctx: Ctx, o: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    yield ctx.create_timer(timedelta(seconds=1))  # a cooling-off period, added later
    held = yield ctx.call_activity(reserve, input=o)
    paid = yield ctx.call_activity(charge, input=_charge_request(o))
    sent = yield ctx.call_activity(ship, input=o["id"])
    return {"order": o["id"], "items": held["items"], "receipt": paid, "tracking": sent,
            "at": ctx.current_utc_datetime.isoformat()}


VARIANTS = {
    "order_refactored": None,
    "order_new_activity": "different-activity",
    "order_new_input": "different-input",
    "order_swapped": "different-order",
    "order_new_result": "different-outcome",
    "order_timer_first": "nondeterminism-error",
}
"""Function name -> the divergence kind its replay of order.json reports (None: clean)."""


@wf.alternate_name("refund")
def refund_unpatched(ctx: Ctx, req: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """``refund`` with the ``refund-v2`` patch taken out (as if reverted): every run takes
    the old rule, so a history recorded with the patch taken replays to another activity,
    and ``histaudit replay`` names the patch."""
    amount = yield ctx.call_activity(refund_rule_v1, input=req)
    return {"refund": amount, "rule": refund_rule_v1.__name__}
