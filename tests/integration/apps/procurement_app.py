"""A procurement agent that uses every Dapr Workflow feature histaudit signs, at once.

``procurement`` (input ``{"approval_timeout_s": N}``):

1. asks 3 vendors for a quote, fanned out, each call under a RetryPolicy;
2. negotiates with the two cheapest in child workflows ``negotiate`` (instance ids
   ``<parent>-neg-<vendor>``), each calling ``counter_offer``;
3. waits a one-second durable timer (a cooling-off period);
4. races the external event ``approved`` against a durable timer of
   ``approval_timeout_s`` seconds;
5. approved: ``place_order`` places the order once (the side effect ``place-order``
   appends a line to ``$DATA_DIR/orders.log``); timed out: no order;
6. runs the child ``monitor`` (``<parent>-monitor``), which calls ``check_delivery`` and
   continues as new three times (generations 0–3).

Prints ``ready`` once its worker is connected; serves until killed. Each activity's
body passes the crash point ``ran:<activity>`` after its work, and ``place_order`` the
effect's own points.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator
from datetime import timedelta
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import side_effect
from histaudit.crash import crash_point
from histaudit.interceptor import AuditedWorkflowRuntime

ORDERS = Path(os.environ.get("DATA_DIR", ".")) / "orders.log"
VENDORS = 3
GENERATIONS = 3  # continue_as_new calls of monitor
RETRY = wf.RetryPolicy(first_retry_interval=timedelta(milliseconds=200), max_number_of_attempts=3)

wfr = AuditedWorkflowRuntime()


@wfr.activity(name="quote_vendor")
def quote_vendor(ctx: wf.WorkflowActivityContext, vendor: int) -> dict[str, int]:
    crash_point("ran:quote_vendor")
    return {"vendor": vendor, "price": 100 + 7 * ((vendor * 5) % VENDORS)}


@wfr.activity(name="counter_offer")
def counter_offer(ctx: wf.WorkflowActivityContext, quote: dict[str, int]) -> dict[str, int]:
    crash_point("ran:counter_offer")
    return {"vendor": quote["vendor"], "price": quote["price"] - 5}


@wfr.activity(name="place_order")
def place_order(ctx: wf.WorkflowActivityContext, offer: dict[str, int]) -> dict[str, Any]:
    receipt = {"order": f"{ctx.workflow_id}:{offer['vendor']}", "price": offer["price"]}
    with side_effect(ctx, "place-order", key=receipt["order"]) as effect:
        if effect.already_done:
            effect.skip()
        elif effect.uncertain and _ordered(receipt["order"]):
            effect.skip()  # the crashed attempt did place it: this one did not
        else:
            with ORDERS.open("a", encoding="utf-8") as fh:
                fh.write(f"{receipt['order']} {receipt['price']}\n")
            effect.result = receipt
    crash_point("ran:place_order")
    return receipt


def _ordered(order: str) -> bool:
    return ORDERS.exists() and any(line.split(" ", 1)[0] == order
                                   for line in ORDERS.read_text(encoding="utf-8").splitlines())


@wfr.activity(name="check_delivery")
def check_delivery(ctx: wf.WorkflowActivityContext, check: int) -> str:
    crash_point("ran:check_delivery")
    return "delivered" if check >= GENERATIONS else "in transit"


@wfr.workflow(name="negotiate")
def negotiate(ctx: wf.DaprWorkflowContext, quote: dict[str, int]) -> Generator[Any, Any, Any]:
    offer = yield ctx.call_activity(counter_offer, input=quote)
    return offer


@wfr.workflow(name="monitor")
def monitor(ctx: wf.DaprWorkflowContext, check: int) -> Generator[Any, Any, Any]:
    status = yield ctx.call_activity(check_delivery, input=check)
    if check < GENERATIONS:
        ctx.continue_as_new(check + 1)
        return None
    return status


@wfr.workflow(name="procurement")
def procurement(ctx: wf.DaprWorkflowContext, req: dict[str, Any]) -> Generator[Any, Any, Any]:
    quotes = yield wf.when_all([ctx.call_activity(quote_vendor, input=v, retry_policy=RETRY)
                                for v in range(VENDORS)])
    best = sorted(quotes, key=lambda q: (q["price"], q["vendor"]))[:2]
    offers = yield wf.when_all([ctx.call_child_workflow(
        negotiate, input=q, instance_id=f"{ctx.instance_id}-neg-{q['vendor']}") for q in best])
    offer = min(offers, key=lambda o: (o["price"], o["vendor"]))
    yield ctx.create_timer(timedelta(seconds=1))
    ctx.set_custom_status({"stage": "awaiting approval", "offer": offer})
    approved = ctx.wait_for_external_event("approved")
    timeout = ctx.create_timer(timedelta(seconds=req["approval_timeout_s"]))
    winner = yield wf.when_any([approved, timeout])
    if winner is timeout:
        return {"offer": offer, "decision": "expired", "order": None, "delivery": None}
    ctx.set_custom_status({"stage": "ordering", "offer": offer})
    order = yield ctx.call_activity(place_order, input=offer)
    delivery = yield ctx.call_child_workflow(monitor, input=0,
                                             instance_id=f"{ctx.instance_id}-monitor")
    return {"offer": offer, "decision": approved.get_result(), "order": order,
            "delivery": delivery}


if __name__ == "__main__":
    wfr.start()
    print("ready", flush=True)
    threading.Event().wait()
