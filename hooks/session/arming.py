"""The gate ladder (spec §4): whether a match may arm a plan, and in which mode.

Pure: the controller gathers the facts (the switches, the wrapped servers, whether a delivery tool
said hello, the permission mode) and this decides. A decline carries the ``replay.decision`` code.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Literal

import msgspec

from bir.core.coverage import ReplayMode, mode_for
from bir.core.types import Matched, Scenario

DecisionCode = Literal[
    "replay_off",
    "scenario_not_ready",
    "similarity_below",
    "service_unhealthy",
    "match_slow",
    "match_timeout",
    "match_late",
    "arm_timeout",
    "arm_unannounced",
    "no_delivery_tool",
    "missing_target",
    "plan_mode",
    "vetoed",
]


@dataclass(frozen=True)
class Decline:
    code: DecisionCode
    why: str


@dataclass(frozen=True)
class Armable:
    scenario: Scenario
    mode: ReplayMode


def ladder(
    matched: Matched,
    *,
    replay_on: bool,
    min_similarity: float,
    wrapped: AbstractSet[str],
    delivery_live: bool,
    permission_mode: str | None,
) -> Armable | Decline:
    """Run the gates of §4 and the refusals past them, in order; the first that declines answers."""
    if not replay_on:
        return Decline("replay_off", "replay is off for this project")
    scenario = matched.scenario
    if scenario is None or (scenario.state not in (None, "ready")) or not scenario.steps:
        return Decline("scenario_not_ready", "the match carries no ready scenario with steps")
    if matched.similarity < min_similarity:
        return Decline(
            "similarity_below",
            f"similarity {matched.similarity:.3f} is below BIR_MIN_STEER_SIMILARITY {min_similarity}",
        )
    mode = mode_for(scenario.steps, wrapped)
    if mode == "none":
        # Every step can at least be steered (the model calls it); only an empty plan has no mode.
        return Decline("scenario_not_ready", "no step of the scenario can run here")
    if permission_mode == "plan":
        return Decline("plan_mode", "the session is in plan mode: nothing is announced")
    if mode == "direct" and not delivery_live:
        return Decline("no_delivery_tool", "no running bir server has said it serves run_scenario")
    return Armable(scenario if scenario.id else msgspec.structs.replace(scenario, id=matched.scenario_id), mode)
