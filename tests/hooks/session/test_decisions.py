"""Every decline code the controller has, each logged exactly once for its turn, through the real routes
(the fake BaseIn over loopback HTTP, a real ``bir-proxy`` over the demo fleet server, real V8); and the
README's list of codes is the type's."""

from __future__ import annotations

import re
import time
from typing import get_args

import anyio
import pytest

from bir.hooks import api
from bir.hooks.session import controller as controller_module
from bir.hooks.session.arming import DecisionCode
from tests.fakes.baseinsvc import Canned
from tests.hooks.control_rig import PROMPT, Rig, direct_hit, hook_input, scenario
from tests.paths import REPO

pytestmark = pytest.mark.anyio

SCENARIO_ID = scenario()["id"]


def codes(rig: Rig) -> list[str]:
    return [line["code"] for line in rig.events("replay.decision")]


async def prompt(rig: Rig) -> dict[str, object]:
    return await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))


def booked(rig: Rig) -> list[tuple[str, str]]:
    """Each report the turn settled: its scenario and outcome (a costless ``not_steered`` is settled
    without a request, the 202 rule)."""
    return [(line["scenario_id"], line["outcome"]) for line in rig.events("replay.reported")]


async def end_turn(rig: Rig) -> None:
    await rig.hook("/session/stop", hook_input("Stop", last_assistant_message="done"))
    await rig.hook("/session/end", hook_input("SessionEnd", reason="other"))


async def test_replay_off_declines_a_hit_once_when_it_lands_and_books_the_baseline(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.switches["replay"] = False
    assert await prompt(rig) == {}
    await rig.until(lambda: codes(rig))
    assert codes(rig) == ["replay_off"]
    await end_turn(rig)
    assert booked(rig) == [(SCENARIO_ID, "not_steered")]
    assert codes(rig) == ["replay_off"]


async def test_a_service_cooling_down_is_not_waited_on_and_a_hit_declines_service_unhealthy(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.controller.health.failed(time.monotonic())
    assert await prompt(rig) == {}
    await rig.until(lambda: codes(rig))
    assert codes(rig) == ["service_unhealthy"]
    assert rig.events("plan.armed") == []


async def test_while_the_match_gate_holds_a_hit_declines_match_slow(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.controller.gate.slow(time.monotonic())
    assert await prompt(rig) == {}
    await rig.until(lambda: codes(rig))
    assert codes(rig) == ["match_slow"]


@pytest.mark.settings(match_budget_ms=200)
async def test_a_match_past_its_budget_logs_match_timeout_and_when_it_lands_match_late(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.fake.route_latency_s["match"] = 0.8
    assert await prompt(rig) == {}
    assert codes(rig) == ["match_timeout"]
    await rig.until(lambda: len(codes(rig)) == 2)
    assert codes(rig) == ["match_timeout", "match_late"]
    assert rig.events("plan.armed") == []
    await end_turn(rig)
    assert booked(rig) == [(SCENARIO_ID, "not_steered")]


async def test_a_plan_not_ready_inside_the_prompts_budget_declines_arm_timeout(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controller_module, "ARM_BUDGET_S", 0.0)
    direct_hit(rig.fake)
    rig.fake.route_latency_s["derive"] = 1.0
    assert await prompt(rig) == {}
    assert codes(rig) == ["arm_timeout"]
    assert rig.events("plan.armed") == []
    await end_turn(rig)
    assert codes(rig) == ["arm_timeout"]
    assert rig.events("replay.vetoed") == []


async def test_a_plan_armed_after_the_prompt_was_answered_is_retired_unannounced(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.fake.route_latency_s["derive"] = 0.5

    async def deadline_passes() -> None:
        # What the prompt route does at its deadline: answer without the directive.
        rig.controller.overdue("UserPromptSubmit", hook_input_typed())

    answer = await rig.prompt_beside("run.matched", deadline_passes)
    assert answer == {}
    assert len(rig.events("plan.armed")) == 1
    assert codes(rig) == ["arm_unannounced"]
    await end_turn(rig)
    assert codes(rig) == ["arm_unannounced"]
    assert rig.events("replay.vetoed") == []


def hook_input_typed() -> api.HookInput:
    return api.decode(api.HookInput, api.encode(hook_input("UserPromptSubmit", prompt=PROMPT)))


async def test_a_scenario_that_is_not_ready_declines_scenario_not_ready(rig: Rig) -> None:
    data = scenario()
    data["state"] = "calculating"
    rig.fake.add_match(PROMPT, data)
    assert await prompt(rig) == {}
    assert codes(rig) == ["scenario_not_ready"]


async def test_a_target_the_derivation_leaves_empty_declines_missing_target(rig: Rig) -> None:
    data = scenario()
    rig.fake.add_match(PROMPT, data)
    rig.fake.derive_answers[data["id"]] = Canned(
        200, {"params": {}, "derived": False, "missing": ["region"], "costUsd": 0.0}
    )
    assert await prompt(rig) == {}
    with anyio.fail_after(10):
        await rig.until(lambda: codes(rig))
    assert codes(rig) == ["missing_target"]


def test_the_readme_lists_exactly_the_decline_codes_the_controller_has() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = readme[readme.index("(one `replay.decision` line with a code:") :]
    sentence = sentence[: sentence.index(";")]
    listed = re.findall(r"`([a-z_]+)`", sentence.split("code:", 1)[1])
    # `vetoed` is logged as `replay.vetoed`, not as a decision line.
    assert sorted(listed) == sorted(code for code in get_args(DecisionCode) if code != "vetoed")
