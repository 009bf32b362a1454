from __future__ import annotations

from bir.evaluator.refusals import RefusalLedger


def test_a_refusal_holds_for_its_period_then_lapses() -> None:
    now = [0.0]
    ledger = RefusalLedger(refuse_for_s=600, clock=lambda: now[0])
    ledger.record("k", "timeout", "ran longer than 1000 ms")
    now[0] = 599.0
    entry = ledger.check("k")
    assert entry is not None
    assert entry.message == "ran longer than 1000 ms"
    now[0] = 600.0
    assert ledger.check("k") is None
    assert len(ledger) == 0


def test_the_ledger_is_bounded_and_drops_the_oldest() -> None:
    ledger = RefusalLedger(max_entries=3)
    for key in "abcd":
        ledger.record(key, "memory", key)
    assert ledger.check("a") is None
    assert [ledger.check(k) is not None for k in "bcd"] == [True, True, True]
