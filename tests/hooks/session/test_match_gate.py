"""The service's cool-down and the match gate (spec §10, §14), on a clock the test holds."""

from __future__ import annotations

import pytest

from bir.hooks.session.match_gate import COOL_DOWN_S, HOLD_FIRST_S, HOLD_MAX_S, MatchGate, ServiceHealth


@pytest.mark.parametrize(
    ("after_s", "cooling", "remaining"),
    [(0.0, True, COOL_DOWN_S), (COOL_DOWN_S / 2, True, COOL_DOWN_S / 2), (COOL_DOWN_S, False, 0.0), (1e6, False, 0.0)],
)
def test_a_failure_cools_the_service_down_for_a_minute(after_s: float, cooling: bool, remaining: float) -> None:
    health = ServiceHealth()
    health.failed(100.0)
    assert health.cooling(100.0 + after_s) == cooling
    assert health.remaining(100.0 + after_s) == pytest.approx(remaining)


def test_an_answer_ends_the_cool_down_at_once() -> None:
    health = ServiceHealth()
    health.failed(0.0)
    health.answered()
    assert not health.cooling(0.0)
    assert health.remaining(0.0) == 0.0


def test_each_slow_match_doubles_the_hold_up_to_its_ceiling() -> None:
    gate = MatchGate()
    holds = [gate.slow(0.0) for _ in range(6)]
    assert holds == [HOLD_FIRST_S, 2 * HOLD_FIRST_S, 4 * HOLD_FIRST_S, HOLD_MAX_S, HOLD_MAX_S, HOLD_MAX_S]


@pytest.mark.parametrize(("at_s", "held"), [(0.0, True), (HOLD_FIRST_S - 1, True), (HOLD_FIRST_S, False)])
def test_a_hold_keeps_prompts_off_the_match_until_it_ends(at_s: float, held: bool) -> None:
    gate = MatchGate()
    gate.slow(0.0)
    assert gate.held(at_s) == held


def test_a_fast_match_ends_the_hold_and_says_whether_there_was_one() -> None:
    gate = MatchGate()
    assert gate.fast() is False
    gate.slow(0.0)
    assert gate.fast() is True
    assert not gate.held(1.0)
    assert gate.slow(2.0) == HOLD_FIRST_S
