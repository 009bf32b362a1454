"""The gate ladder (spec §4) as a table: each row one set of facts, and the verdict the ladder gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bir.core.types import Matched, parse_match
from bir.hooks.session.arming import Armable, Decline, ladder

FLEET = "mcp__fleet__list_devices"


def matched(
    *, steps: tuple[str, ...] = (FLEET,), state: str | None = "ready", similarity: float = 0.95, target: bool = False
) -> Matched:
    scenario: dict[str, Any] = {
        "id": "scn_1",
        "state": state,
        "steps": [{"stepIndex": i, "toolName": name} for i, name in enumerate(steps)],
        "paramsObject": {"region": {"sampleValue": "eu", "role": "target" if target else "setting"}},
    }
    return hit({"runId": "run_1", "similarity": similarity, "executionTicket": "t", "scenario": scenario})


def hit(matched: dict[str, Any]) -> Matched:
    answer = parse_match({"id": None, "matched": matched}).matched
    assert answer is not None
    return answer


@dataclass(frozen=True)
class Facts:
    replay_on: bool = True
    wrapped: frozenset[str] = frozenset({"fleet"})
    delivery_live: bool = True
    permission_mode: str | None = "default"
    match: dict[str, Any] = field(default_factory=dict)


ROWS: list[tuple[str, Facts, str]] = [
    ("every gate passes: direct", Facts(), "direct"),
    ("a built-in among the steps: steer", Facts(match={"steps": (FLEET, "Bash")}), "steer"),
    ("replay off", Facts(replay_on=False), "replay_off"),
    ("scenario not ready", Facts(match={"state": "calculating"}), "scenario_not_ready"),
    ("no steps", Facts(match={"steps": ()}), "scenario_not_ready"),
    ("similarity below", Facts(match={"similarity": 0.5}), "similarity_below"),
    ("an unwrapped server's tool is steered", Facts(wrapped=frozenset(), match={"steps": ("mcp__other__x",)}), "steer"),
    ("plan mode", Facts(permission_mode="plan"), "plan_mode"),
    ("direct with no delivery tool", Facts(delivery_live=False), "no_delivery_tool"),
    ("steer needs no delivery tool", Facts(delivery_live=False, match={"steps": ("Bash",)}), "steer"),
    ("a target is derived later, not gated here", Facts(match={"target": True}), "direct"),
    # The ladder's order: the first gate that declines answers.
    ("replay off wins over a poor match", Facts(replay_on=False, match={"similarity": 0.1}), "replay_off"),
    ("not ready wins over similarity", Facts(match={"state": "draft", "similarity": 0.1}), "scenario_not_ready"),
    ("plan mode wins over no delivery tool", Facts(permission_mode="plan", delivery_live=False), "plan_mode"),
]


@pytest.mark.parametrize(("name", "facts", "verdict"), ROWS, ids=[row[0] for row in ROWS])
def test_the_ladder_gives_each_set_of_facts_its_verdict(name: str, facts: Facts, verdict: str) -> None:
    answer = ladder(
        matched(**facts.match),
        replay_on=facts.replay_on,
        min_similarity=0.92,
        wrapped=facts.wrapped,
        delivery_live=facts.delivery_live,
        permission_mode=facts.permission_mode,
    )
    got = answer.mode if isinstance(answer, Armable) else answer.code
    assert got == verdict
    if isinstance(answer, Decline):
        assert answer.why


def test_an_armable_scenario_without_its_own_id_takes_the_matchs() -> None:
    answer = ladder(
        hit(
            {
                "runId": "run_1",
                "scenarioId": "scn_9",
                "similarity": 0.99,
                "scenario": {"state": "ready", "steps": [{"stepIndex": 0, "toolName": FLEET}]},
            }
        ),
        replay_on=True,
        min_similarity=0.92,
        wrapped={"fleet"},
        delivery_live=True,
        permission_mode=None,
    )
    assert isinstance(answer, Armable)
    assert answer.scenario.id == "scn_9"
