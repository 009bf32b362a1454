"""What ``bir stats`` counts from the booked reports: tokens, dollars and seconds against the recorded run."""

from __future__ import annotations

from typing import Any

from bir.core.pricing import PRICING_VERSION
from bir.hooks.local.booking import Baseline, scenario_stats, totals

FINISH = {
    "durationMs": 20_000,
    "usage": [{"model": "claude-sonnet-4-5", "inputTokens": 30_000, "outputTokens": 2_000}],
    "costUsd": 0.12,
    "measured": True,
    "pricingVersion": PRICING_VERSION,
}


def booked(outcome: str, *, usage: list[dict[str, Any]] | None, cost: float = 0.02) -> dict[str, Any]:
    report: dict[str, Any] = {"outcome": outcome, "sessionCostUsd": cost, "durationMs": 5_000}
    if usage is not None:
        report["usage"] = usage
    return {"outcome": outcome, "ledger": "savings", "measured": True, "report": report}


def line(*executions: dict[str, Any]) -> dict[str, Any]:
    return scenario_stats(
        "scn_1",
        intent="i",
        state="ready",
        runs=1,
        hits=len(executions),
        baseline=Baseline.of(FINISH),
        executions=executions,
    )


def test_a_replay_whose_report_carries_its_usage_saved_the_recorded_runs_tokens_less_its_own() -> None:
    row = line(
        booked("steered_full", usage=[{"model": "claude-sonnet-4-5", "inputTokens": 3_000, "outputTokens": 300}])
    )
    assert row["savedTokens"] == 32_000 - 3_300
    assert row["tokenReplays"] == 1
    assert row["savedUsd"] == 0.1
    assert row["savedSeconds"] == 15.0


def test_tokens_count_over_the_reports_with_usage_and_are_not_known_when_none_has_any() -> None:
    usage = [{"model": "claude-sonnet-4-5", "inputTokens": 2_000}]
    mixed = line(booked("steered_full", usage=usage), booked("diverged", usage=None))
    assert mixed["savedTokens"] == 30_000
    assert (mixed["tokenReplays"], mixed["replays"]) == (1, 2)
    unknown = line(booked("steered_full", usage=None))
    assert unknown["savedTokens"] is None
    assert unknown["savedUsd"] == 0.1
    assert line()["savedTokens"] == 0
    summed = totals([mixed, unknown])
    assert (summed["savedTokens"], summed["tokenReplays"], summed["replays"]) == (30_000, 1, 3)
    assert totals([unknown])["savedTokens"] is None
