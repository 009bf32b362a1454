"""Booking an execution report with the service's rules, and what ``bir stats`` reads (issue 18 item 6). Pure.

The rules (service-contract.md): the ticket is the execution's id and is redeemed once; ``not_steered``
and ``failed`` go to the baseline, the other outcomes to the savings ledger; a report whose
``pricingVersion`` is not this bir's is stored ``measured: false``; a report with no cost, no error and
no failed step is not worth booking (``202``) — its ticket is still spent.

A saving is measured against the recorded run's own cost: the source run's finish (its usage, cost and
duration) is the baseline, and a replayed turn saved the difference. Only a measured report against a
measured baseline counts in dollars; tokens count where both sides carry usage (a report carries the
turn's ``usage`` since issue 18's second part; one booked before has none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from bir.core.pricing import PRICING_VERSION, usage_tokens

OUTCOMES: Final = frozenset({"steered_full", "diverged", "fell_back", "failed", "not_steered"})
BASELINE_OUTCOMES: Final = frozenset({"not_steered", "failed"})
Ledger = Literal["baseline", "savings", "none"]
_COSTS: Final = ("deriveCostUsd", "sessionCostUsd", "fallbackCostUsd")


@dataclass(frozen=True)
class Decision:
    ledger: Ledger
    measured: bool


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def decide(report: Mapping[str, Any], *, pricing_version: str = PRICING_VERSION) -> Decision:
    """Which ledger a valid report goes to, and whether its cost is a measurement."""
    costs = [_number(report.get(k)) for k in _COSTS]
    failed_step = any(isinstance(s, dict) and s.get("status") == "failed" for s in report.get("steps") or [])
    if not any(costs) and not report.get("error") and not failed_step:
        return Decision("none", False)
    measured = report.get("measured") is True and report.get("pricingVersion") == pricing_version
    return Decision("baseline" if report.get("outcome") in BASELINE_OUTCOMES else "savings", measured)


def _tokens(usage: object) -> int | None:
    if not isinstance(usage, list):
        return None
    total = 0
    for item in usage:
        if isinstance(item, dict):
            total += usage_tokens(
                {
                    "input_tokens": item.get("inputTokens"),
                    "output_tokens": item.get("outputTokens"),
                    "cache_creation_input_tokens": item.get("cacheCreationInputTokens"),
                    "cache_read_input_tokens": item.get("cacheReadInputTokens"),
                }
            )
    return total


@dataclass(frozen=True)
class Baseline:
    """What the recorded run cost: the scenario's own baseline."""

    cost_usd: float | None
    tokens: int | None
    seconds: float | None

    @classmethod
    def of(cls, finish: Mapping[str, Any] | None) -> Baseline:
        if not finish:
            return cls(None, None, None)
        measured = finish.get("measured") is True and finish.get("pricingVersion") == PRICING_VERSION
        duration = finish.get("durationMs")
        return cls(
            _number(finish.get("costUsd")) if measured else None,
            _tokens(finish.get("usage")),
            _number(duration) / 1000 if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
        )


def scenario_stats(
    scenario_id: str,
    *,
    intent: str,
    state: str,
    runs: int,
    hits: int,
    baseline: Baseline,
    executions: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """One scenario's line of ``bir stats``: runs, hits, outcome mix and what the replays saved."""
    outcomes: dict[str, int] = {}
    saved_usd = 0.0
    saved_tokens = 0
    token_replays = 0
    saved_s = 0.0
    measured_replays = 0
    for row in executions:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
        if row["ledger"] != "savings":
            continue
        report = row["report"]
        spent = sum(_number(report.get(k)) for k in _COSTS)
        if row["measured"] and baseline.cost_usd is not None:
            saved_usd += baseline.cost_usd - spent
            measured_replays += 1
        tokens = _tokens(report.get("usage"))
        if tokens is not None and baseline.tokens is not None:
            saved_tokens += baseline.tokens - tokens
            token_replays += 1
        if baseline.seconds is not None:
            saved_s += baseline.seconds - _number(report.get("durationMs")) / 1000
    replays = sum(n for o, n in outcomes.items() if o not in BASELINE_OUTCOMES)
    return {
        "scenarioId": scenario_id,
        "intent": intent,
        "state": state,
        "runs": runs,
        "hits": hits,
        "outcomes": outcomes,
        "replays": replays,
        "measuredReplays": measured_replays,
        "baseline": {"costUsd": baseline.cost_usd, "tokens": baseline.tokens, "seconds": baseline.seconds},
        "savedUsd": round(saved_usd, 6),
        # Counted over the replays whose report carries usage (``tokenReplays``); not known when none does.
        "savedTokens": saved_tokens if token_replays or not replays else None,
        "tokenReplays": token_replays,
        "savedSeconds": round(saved_s, 3),
    }


def totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sums over every scenario's line."""
    out: dict[str, Any] = {
        "scenarios": 0,
        "hits": 0,
        "replays": 0,
        "savedUsd": 0.0,
        "savedTokens": 0,
        "tokenReplays": 0,
        "savedSeconds": 0.0,
    }
    for row in rows:
        out["scenarios"] += 1
        out["hits"] += row["hits"]
        out["replays"] += row["replays"]
        out["savedUsd"] = round(out["savedUsd"] + row["savedUsd"], 6)
        out["savedSeconds"] = round(out["savedSeconds"] + row["savedSeconds"], 3)
        out["savedTokens"] += row["savedTokens"] or 0
        out["tokenReplays"] += row["tokenReplays"]
    if out["replays"] and not out["tokenReplays"]:
        out["savedTokens"] = None
    return out
