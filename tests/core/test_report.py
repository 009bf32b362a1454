from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bir.core.outcome import Outcome, StepLedger, StepVerdict
from bir.core.pricing import PRICING_VERSION
from bir.core.report import MAX_ERROR_CHARS, MAX_PROMPT_CHARS, MAX_USAGE_MODELS, build_report
from bir.core.transcript import ModelUsage


def _report(ledger: StepLedger | None = None, **overrides: Any) -> dict[str, Any] | None:
    args: dict[str, Any] = {
        "ticket": "tkt_01HXFLEET",
        "outcome": "steered_full",
        "derive_cost_usd": 0.0012,
        "session_cost_usd": 0.05,
        "duration_ms": 1234,
        "steps_planned": 3,
        "steps_pinned": 3,
        "measured": True,
        "ledger": ledger if ledger is not None else StepLedger(),
        "prompt": "show the riskiest device in eu-west-1",
    }
    args.update(overrides)
    return build_report(**args)


def test_a_full_run_reports_every_field_in_camel_case() -> None:
    ledger = StepLedger(
        (
            StepVerdict(0, "mcp__fleet__list_devices", "ok", duration_ms=40),
            StepVerdict(1, "mcp__fleet__get_device", "ok", duration_ms=25),
        )
    )
    assert _report(ledger) == {
        "ticket": "tkt_01HXFLEET",
        "outcome": "steered_full",
        "deriveCostUsd": 0.0012,
        "sessionCostUsd": 0.05,
        "fallbackCostUsd": 0.0,
        "durationMs": 1234,
        "stepsPlanned": 3,
        "stepsPinned": 3,
        "measured": True,
        "pricingVersion": PRICING_VERSION,
        "prompt": "show the riskiest device in eu-west-1",
        "steps": [
            {"stepIndex": 0, "toolName": "mcp__fleet__list_devices", "status": "ok", "durationMs": 40},
            {"stepIndex": 1, "toolName": "mcp__fleet__get_device", "status": "ok", "durationMs": 25},
        ],
    }


def test_a_step_the_turn_never_reached_is_absent_from_the_steps() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "ok"), StepVerdict(1, "b", "skipped", stage="send", error="no proxy")))
    report = _report(ledger, outcome="fell_back")
    assert report is not None
    assert [s["stepIndex"] for s in report["steps"]] == [0, 1]
    assert report["steps"][1] == {
        "stepIndex": 1,
        "toolName": "b",
        "status": "skipped",
        "stage": "send",
        "error": "no proxy",
    }


def test_the_error_headline_is_lifted_from_the_first_failed_step() -> None:
    ledger = StepLedger(
        (
            StepVerdict(0, "a", "ok"),
            StepVerdict(2, "c", "failed", stage="output", error="later"),
            StepVerdict(1, "b", "failed", stage="input", error="TypeError: x is undefined"),
        )
    )
    report = _report(ledger, outcome="failed")
    assert report is not None
    assert (report["error"], report["errorStage"], report["errorStepIndex"], report["errorToolName"]) == (
        "TypeError: x is undefined",
        "input",
        1,
        "b",
    )
    blamed = next(s for s in report["steps"] if s["stepIndex"] == report["errorStepIndex"])
    assert blamed["error"] == report["error"]
    assert blamed["stage"] == report["errorStage"]


def test_a_run_with_no_failed_step_has_no_error_fields() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "skipped", stage="call", error="timed out"),))
    report = _report(ledger, outcome="failed")
    assert report is not None
    assert not {"error", "errorStage", "errorStepIndex", "errorToolName"} & report.keys()


@pytest.mark.parametrize("outcome", ["not_steered", "failed"])
def test_a_costless_errorless_decline_is_not_worth_sending(outcome: Outcome) -> None:
    assert _report(outcome=outcome, derive_cost_usd=0.0, session_cost_usd=0.0, steps_pinned=0) is None


def test_a_costless_decline_with_a_failed_step_is_sent() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "failed", stage="params", error="target region missing"),))
    report = _report(ledger, outcome="failed", derive_cost_usd=0.0, session_cost_usd=0.0)
    assert report is not None
    assert report["error"] == "target region missing"


def test_a_decline_that_cost_something_is_a_baseline_sample_worth_sending() -> None:
    report = _report(outcome="not_steered", derive_cost_usd=0.0, session_cost_usd=0.2, steps_pinned=0)
    assert report is not None
    assert report["sessionCostUsd"] == 0.2


def test_a_costless_steered_run_is_still_sent() -> None:
    assert _report(derive_cost_usd=0.0, session_cost_usd=0.0, measured=False) is not None


def test_error_messages_and_the_prompt_are_bounded() -> None:
    ledger = StepLedger((StepVerdict(0, "a", "failed", stage="output", error="E" * 50_000),))
    report = _report(ledger, outcome="fell_back", prompt="p" * 100_000)
    assert report is not None
    assert len(report["error"]) <= MAX_ERROR_CHARS
    assert len(report["steps"][0]["error"]) <= MAX_ERROR_CHARS
    assert len(report["prompt"]) <= MAX_PROMPT_CHARS


def test_the_prompt_is_redacted_before_it_is_sent() -> None:
    report = _report(prompt="deploy with key sk-SECRET", redact=lambda s: s.replace("sk-SECRET", "[REDACTED]"))
    assert report is not None
    assert report["prompt"] == "deploy with key [REDACTED]"


def test_costs_that_are_not_real_numbers_are_sent_as_zero() -> None:
    report = _report(derive_cost_usd=math.nan, session_cost_usd=-3.0, fallback_cost_usd=math.inf, outcome="diverged")
    assert report is not None
    assert (report["deriveCostUsd"], report["sessionCostUsd"], report["fallbackCostUsd"]) == (0.0, 0.0, 0.0)


def test_a_report_without_a_ticket_or_prompt_leaves_them_out_and_is_plain_json() -> None:
    report = _report(ticket=None, prompt=None)
    assert report is not None
    assert "ticket" not in report
    assert "prompt" not in report
    assert json.loads(json.dumps(report, allow_nan=False)) == report


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown outcome"):
        _report(outcome="direct")


def test_the_turns_usage_goes_per_model_in_the_finishs_shape_and_is_left_out_when_there_is_none() -> None:
    usage = [
        ModelUsage("claude-haiku-4-5", input_tokens=10, output_tokens=2),
        ModelUsage("claude-sonnet-4-5", input_tokens=1000, output_tokens=100, cache_read_input_tokens=5000),
    ]
    report = _report(usage=usage)
    assert report is not None
    assert report["usage"] == [
        {
            "model": "claude-haiku-4-5",
            "inputTokens": 10,
            "outputTokens": 2,
            "cacheCreationInputTokens": 0,
            "cacheReadInputTokens": 0,
        },
        {
            "model": "claude-sonnet-4-5",
            "inputTokens": 1000,
            "outputTokens": 100,
            "cacheCreationInputTokens": 0,
            "cacheReadInputTokens": 5000,
        },
    ]
    without = _report()
    assert without is not None
    assert "usage" not in without


def test_the_usage_is_bounded_to_its_first_models() -> None:
    usage = [ModelUsage(f"model-{n:03d}", input_tokens=n) for n in range(MAX_USAGE_MODELS + 30)]
    report = _report(usage=usage)
    assert report is not None
    assert [u["model"] for u in report["usage"]] == [f"model-{n:03d}" for n in range(MAX_USAGE_MODELS)]
