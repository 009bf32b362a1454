from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bir.core.outcome import (
    OUTCOME_RANK,
    Outcome,
    PlanEnd,
    RunFacts,
    StepLedger,
    StepVerdict,
    blame_step,
    decide_outcome,
    steps_pinned,
    upgrade,
)

outcomes = st.sampled_from(list(OUTCOME_RANK))
ends: st.SearchStrategy[PlanEnd] = st.sampled_from(
    ["completed", "retired", "handed_over", "diverged", "out_of_time", "cancelled", "concurrent", "compose_failed"]
)


@settings(deadline=None)
@given(st.lists(outcomes, max_size=20))
def test_the_outcome_ladder_never_goes_down(proposals: list[Outcome]) -> None:
    current: Outcome = "not_steered"
    for proposed in proposals:
        after = upgrade(current, proposed)
        assert OUTCOME_RANK[after] >= OUTCOME_RANK[current]
        assert OUTCOME_RANK[after] >= OUTCOME_RANK[proposed]
        current = after
    assert OUTCOME_RANK[current] == max([0, *(OUTCOME_RANK[p] for p in proposals)])


def test_an_upgrade_moves_up_and_a_downgrade_is_ignored() -> None:
    assert upgrade("failed", "diverged") == "diverged"
    assert upgrade("steered_full", "failed") == "steered_full"


def test_a_second_word_on_a_step_replaces_the_first() -> None:
    ledger = StepLedger()
    ledger.record(StepVerdict(1, "Read", "failed", stage="input", error="boom"))
    ledger.record(StepVerdict(1, "Read", "ok", duration_ms=12))
    assert ledger.verdicts() == (StepVerdict(1, "Read", "ok", duration_ms=12),)


def test_verdicts_come_out_in_step_index_order_and_unreached_steps_are_absent() -> None:
    ledger = StepLedger()
    ledger.record(StepVerdict(2, "Bash", "ok"))
    ledger.record(StepVerdict(0, "mcp__fleet__list_devices", "ok"))
    assert [v.step_index for v in ledger] == [0, 2]
    assert ledger.get(1) is None
    assert len(ledger) == 2


def test_the_blamed_step_is_the_first_failed_one_by_index_not_by_arrival() -> None:
    ledger = StepLedger()
    ledger.record(StepVerdict(3, "b", "failed", stage="output", error="late"))
    ledger.record(StepVerdict(0, "a", "skipped", stage="send"))
    ledger.record(StepVerdict(1, "c", "failed", stage="input", error="early"))
    blamed = blame_step(ledger)
    assert blamed is not None
    assert blamed.step_index == 1
    assert blamed.error == "early"


def test_nothing_is_blamed_when_no_step_failed() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "ok"), StepVerdict(1, "b", "skipped", stage="call")))
    assert blame_step(ledger) is None


def test_a_recorded_stand_in_is_not_counted_as_a_pinned_step() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "ok"), StepVerdict(1, "Read", "recorded"), StepVerdict(2, "b", "ok")))
    assert steps_pinned(ledger) == 2


def test_a_run_that_was_never_armed_is_not_steered() -> None:
    assert decide_outcome(RunFacts(armed=False, steps_planned=3)).outcome == "not_steered"


def test_a_plan_whose_every_step_did_its_work_is_steered_full() -> None:
    decision = decide_outcome(RunFacts(armed=True, end="completed", steps_planned=3, steps_ok=3))
    assert decision.outcome == "steered_full"
    assert decision.measured


def test_a_direct_run_that_used_a_recorded_stand_in_is_diverged_at_best() -> None:
    facts = RunFacts(armed=True, end="completed", steps_planned=3, steps_ok=2, steps_recorded=1)
    assert decide_outcome(facts).outcome == "diverged"


def test_a_run_served_only_recorded_outputs_did_no_work_and_fails() -> None:
    facts = RunFacts(armed=True, end="completed", steps_planned=2, steps_recorded=2)
    assert decide_outcome(facts).outcome == "failed"


def test_a_divergence_that_ran_something_is_diverged() -> None:
    facts = RunFacts(armed=True, end="diverged", steps_planned=4, steps_ok=2)
    assert decide_outcome(facts).outcome == "diverged"


def test_a_divergence_that_ran_nothing_books_failed() -> None:
    facts = RunFacts(armed=True, end="diverged", steps_planned=4, steps_recorded=1)
    assert decide_outcome(facts).outcome == "failed"


def test_a_divergence_that_stopped_at_a_broken_step_books_failed() -> None:
    facts = RunFacts(armed=True, end="diverged", steps_planned=4, steps_ok=2, stopped_at_broken_step=True)
    assert decide_outcome(facts).outcome == "failed"


def test_a_direct_run_out_of_time_after_some_steps_is_diverged_and_before_any_is_failed() -> None:
    assert decide_outcome(RunFacts(armed=True, end="out_of_time", steps_planned=5, steps_ok=2)).outcome == "diverged"
    assert decide_outcome(RunFacts(armed=True, end="out_of_time", steps_planned=5)).outcome == "failed"


def test_a_cancelled_direct_run_books_fell_back_or_failed_and_is_unmeasured() -> None:
    after_work = decide_outcome(RunFacts(armed=True, end="cancelled", steps_planned=3, steps_ok=1))
    before_work = decide_outcome(RunFacts(armed=True, end="cancelled", steps_planned=3))
    assert (after_work.outcome, after_work.measured) == ("fell_back", False)
    assert (before_work.outcome, before_work.measured) == ("failed", False)


def test_a_call_beside_a_pin_in_flight_hands_over_as_fell_back_or_failed() -> None:
    assert decide_outcome(RunFacts(armed=True, end="concurrent", steps_planned=3, steps_ok=1)).outcome == "fell_back"
    assert decide_outcome(RunFacts(armed=True, end="concurrent", steps_planned=3)).outcome == "failed"


def test_an_output_logic_failure_after_its_tool_ran_is_fell_back() -> None:
    facts = RunFacts(armed=True, end="handed_over", steps_planned=3, tool_ran_at_stop=True)
    assert decide_outcome(facts).outcome == "fell_back"


def test_an_input_logic_failure_on_the_first_step_is_failed() -> None:
    assert decide_outcome(RunFacts(armed=True, end="handed_over", steps_planned=3)).outcome == "failed"


def test_a_plan_retired_before_it_ran_anything_is_not_steered() -> None:
    assert decide_outcome(RunFacts(armed=True, end="retired", steps_planned=2)).outcome == "not_steered"


def test_a_composition_that_threw_books_failed() -> None:
    facts = RunFacts(armed=True, end="compose_failed", steps_planned=2, steps_ok=1)
    assert decide_outcome(facts).outcome == "failed"


def test_a_run_without_a_usage_mark_or_with_an_unpriced_model_is_unmeasured() -> None:
    full = RunFacts(armed=True, end="completed", steps_planned=1, steps_ok=1)
    assert not decide_outcome(replace(full, has_mark=False)).measured
    assert not decide_outcome(replace(full, priced=False)).measured


facts_strategy = st.builds(
    RunFacts,
    armed=st.booleans(),
    end=ends,
    steps_planned=st.integers(0, 6),
    steps_ok=st.integers(0, 6),
    steps_recorded=st.integers(0, 6),
    tool_ran_at_stop=st.booleans(),
    stopped_at_broken_step=st.booleans(),
    has_mark=st.booleans(),
    priced=st.booleans(),
)


@settings(deadline=None)
@given(facts_strategy)
def test_a_recorded_stand_in_never_raises_the_outcome_over_the_same_run_without_it(facts: RunFacts) -> None:
    without = decide_outcome(replace(facts, steps_recorded=0)).outcome
    with_more = decide_outcome(replace(facts, steps_recorded=facts.steps_recorded + 1)).outcome
    assert OUTCOME_RANK[with_more] <= OUTCOME_RANK[without]


@settings(deadline=None)
@given(facts_strategy)
def test_a_cancelled_run_is_never_diverged_and_never_measured(facts: RunFacts) -> None:
    decision = decide_outcome(replace(facts, armed=True, end="cancelled"))
    assert decision.outcome in ("fell_back", "failed")
    assert not decision.measured


@settings(deadline=None)
@given(facts_strategy)
def test_diverged_is_booked_only_when_a_step_did_its_work(facts: RunFacts) -> None:
    if decide_outcome(facts).outcome == "diverged":
        assert facts.steps_ok > 0
