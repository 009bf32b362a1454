"""The outbox's pure rules: order, retry, bounds, drafts and the ticket ledger, with values only."""

from __future__ import annotations

from typing import Any

import pytest

from bir.core.service import ServiceError
from bir.hooks.session.outbox_state import (
    Item,
    Kind,
    Policy,
    TicketLedger,
    after_failure,
    backoff_s,
    classify_error,
    next_sendable,
    next_wake,
    over_bounds,
    ripe_drafts,
)


def item(seq: int, kind: Kind = "step", run_id: str | None = "run_1", **fields: Any) -> Item:
    if kind == "report":
        run_id = None
        fields.setdefault("scenario_id", "scn_1")
        fields.setdefault("ticket", f"tkt_{seq}")
    return Item(id=f"i{seq}", seq=seq, kind=kind, body={}, created_at=0.0, run_id=run_id, **fields)


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (ServiceError("timeout", "t", route="step"), "retry"),
        (ServiceError("unreachable", "u", route="step"), "retry"),
        (ServiceError("status", "s", route="step", status=503), "retry"),
        (ServiceError("status", "s", route="step", status=429), "retry"),
        (ServiceError("status", "s", route="step", status=408), "retry"),
        (ServiceError("status", "s", route="step", status=400), "rejected"),
        (ServiceError("status", "s", route="step", status=401), "rejected"),
        (ServiceError("not_configured", "n", route="step"), "rejected"),
        (ServiceError("too_large", "l", route="step"), "rejected"),
    ],
)
def test_only_failures_that_may_pass_are_retried(error: ServiceError, verdict: str) -> None:
    assert classify_error(error) == verdict


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = Policy(backoff_base_s=1.0, backoff_cap_s=5.0)
    assert [backoff_s(n, policy) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_s(10_000, policy) == 5.0


def test_an_item_is_retried_until_its_attempts_or_its_age_run_out() -> None:
    policy = Policy(backoff_base_s=1.0, max_attempts=3, max_age_s=100.0)
    once = after_failure(item(1), 10.0, policy)
    assert once is not None
    assert (once.attempts, once.next_at) == (1, 11.0)
    twice = after_failure(once, 20.0, policy)
    assert twice is not None
    assert (twice.attempts, twice.next_at) == (2, 22.0)
    assert after_failure(twice, 30.0, policy) is None
    assert after_failure(item(2), 100.0, policy) is None


def test_a_runs_items_go_one_at_a_time_in_order_and_reports_go_independently() -> None:
    waiting = item(1, next_at=50.0)
    items = [waiting, item(2), item(3, kind="finish"), item(4, run_id="run_2"), item(5, kind="report")]
    assert next_sendable(items, 10.0) == items[3]
    assert next_sendable([waiting, item(2), item(5, kind="report")], 10.0) == item(5, kind="report")
    assert next_sendable([waiting, item(2)], 10.0) is None
    assert next_wake([waiting, item(2)]) == 50.0
    assert next_sendable([waiting, item(2)], 50.0) == waiting


def test_a_draft_is_never_sent_and_ripens_only_when_another_instance_left_it_long_enough() -> None:
    policy = Policy(draft_max_age_s=100.0)
    mine = item(1, kind="report", draft=True, owner="me")
    theirs = item(2, kind="report", draft=True, owner="dead")
    assert next_sendable([mine, theirs], 1_000.0) is None
    assert next_wake([mine, theirs]) is None
    assert ripe_drafts([mine, theirs], 99.0, "me", policy) == []
    [ripe] = ripe_drafts([mine, theirs], 100.0, "me", policy)
    assert (ripe.id, ripe.draft, ripe.next_at) == ("i2", False, 100.0)


def test_bounds_drop_the_oldest_recording_items_before_any_report() -> None:
    items = [item(1, kind="report"), item(2), item(3, kind="finish"), item(4, run_id="run_2"), item(5, kind="report")]
    sizes = {i.id: (i, 10) for i in items}
    assert over_bounds(sizes, Policy(max_items=5)) == []
    assert [i.seq for i in over_bounds(sizes, Policy(max_items=3))] == [2, 3]
    assert [i.seq for i in over_bounds(sizes, Policy(max_bytes=15))] == [2, 3, 4, 1]


def test_the_ledger_forgets_old_tickets_but_never_a_pending_one() -> None:
    policy = Policy(ledger_max_tickets=2, ledger_max_age_s=100.0)
    ledger = TicketLedger({"old": 0.0, "a": 150.0, "b": 160.0, "c": 170.0, "pending_old": 1.0})
    assert ledger.prune(200.0, policy, frozenset({"pending_old"}))
    assert "old" not in ledger
    assert "pending_old" in ledger
    assert "c" in ledger
    assert len(ledger) == 2


def test_a_ledger_round_trips_and_skips_malformed_entries() -> None:
    ledger = TicketLedger.from_wire({"version": 1, "tickets": {"t1": 5, "t2": "x", "t3": True}})
    assert "t1" in ledger
    assert "t2" not in ledger
    assert "t3" not in ledger
    assert TicketLedger.from_wire(ledger.to_wire()).to_wire() == {"version": 1, "tickets": {"t1": 5.0}}
    assert len(TicketLedger.from_wire(["not", "a", "ledger"])) == 0
    other = TicketLedger({"t1": 1.0, "t9": 9.0})
    ledger.merge(other)
    assert ledger.to_wire()["tickets"] == {"t1": 1.0, "t9": 9.0}
