"""The recorder: a missed turn's steps and finish reach the fake BaseIn through the outbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bir.core.pricing import PRICING_VERSION
from bir.core.service import ServiceClient
from bir.core.transcript import ModelUsage
from bir.hooks.session.outbox import Outbox, outbox_dir
from bir.hooks.session.outbox_state import Policy
from bir.hooks.session.recorder import Recorder
from tests.fakes.fixtures import running_fake_service

FAST = Policy(backoff_base_s=0.02, backoff_cap_s=0.1)
DEADLINE_S = 15.0
USAGE = [ModelUsage("claude-sonnet-4-5", input_tokens=120, output_tokens=30, cache_read_input_tokens=1_000)]


def finish(recorder: Recorder, run_id: str, output: str = "All done.") -> bool:
    return recorder.finish(
        run_id, output, duration_ms=2_500, usage=USAGE, cost_usd=0.0123, measured=True, pricing_version=PRICING_VERSION
    )


@pytest.mark.anyio
async def test_a_missed_turn_records_its_steps_in_settle_order_and_finishes_once(tmp_path: Path) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        assert await service.match("run_miss", "something new") is None
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True)
        async with box.running():
            recorder.start("run_miss")
            assert (
                recorder.step(
                    "run_miss", None, "mcp__fleet__list_devices", {"region": "eu"}, tool_output='{"devices":[]}'
                )
                == 0
            )
            assert recorder.step("run_miss", None, "Read", {"file_path": "/x"}, tool_output="text", duration_ms=12) == 1
            assert recorder.step("run_miss", None, "Bash", {"command": "false"}, tool_output="", error="exit 1") == 2
            assert finish(recorder, "run_miss")
            assert not finish(recorder, "run_miss", "a second seal")
            assert await box.flush(DEADLINE_S)
        steps = fake.steps_of("run_miss")
        assert [(s["stepIndex"], s["toolName"]) for s in steps] == [
            (0, "mcp__fleet__list_devices"),
            (1, "Read"),
            (2, "Bash"),
        ]
        assert steps[0]["toolInput"] == {"region": "eu"}
        assert steps[0]["toolOutput"] == '{"devices":[]}'
        assert steps[1]["durationMs"] == 12
        assert steps[2]["error"] == "exit 1"
        assert "error" not in steps[0]
        assert "durationMs" not in steps[0]
        assert fake.finished["run_miss"] == {
            "output": "All done.",
            "durationMs": 2_500,
            "usage": [
                {
                    "model": "claude-sonnet-4-5",
                    "inputTokens": 120,
                    "outputTokens": 30,
                    "cacheCreationInputTokens": 0,
                    "cacheReadInputTokens": 1_000,
                }
            ],
            "costUsd": 0.0123,
            "measured": True,
            "pricingVersion": PRICING_VERSION,
        }
        assert len(fake.requests_to("finish")) == 1


@pytest.mark.anyio
async def test_a_hit_records_nothing_because_its_run_is_never_started(tmp_path: Path) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True)
        assert recorder.step("run_hit", None, "mcp__fleet__list_devices", {}, tool_output="x") is None
        assert not finish(recorder, "run_hit")
        assert box.pending() == []
        assert fake.requests == []


@pytest.mark.anyio
async def test_housekeeping_calls_are_not_steps_and_take_no_index(tmp_path: Path) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_run("run_1", [])
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True)
        recorder.start("run_1")
        assert recorder.step("run_1", None, "mcp__bir__run_scenario", {"request": "x"}, tool_output="ok") is None
        assert recorder.step("run_1", None, "ToolSearch", {"query": "bir"}, tool_output="ok") is None
        assert (
            recorder.step("run_1", None, "Bash", {"command": "bir scenario show scn_1 && cd x"}, tool_output="ok")
            is None
        )
        assert recorder.step("run_1", None, "Bash", {"command": "bir x; rm -rf /tmp/y"}, tool_output="ok") == 0
        async with box.running():
            assert await box.flush(DEADLINE_S)
        assert [s["toolName"] for s in fake.steps_of("run_1")] == ["Bash"]


def test_without_a_service_nothing_is_queued_but_indices_are_still_allocated(tmp_path: Path) -> None:
    recorder = Recorder(None, service_configured=False)
    recorder.start("run_1")
    assert not recorder.sending
    assert recorder.step("run_1", None, "Read", {}, tool_output="x") == 0
    assert recorder.step("run_1", None, "Read", {}, tool_output="y") == 1
    assert not finish(recorder, "run_1")
    assert not (tmp_path / "outbox").exists()


@pytest.mark.anyio
async def test_an_explicit_step_index_moves_the_runs_counter_past_it(tmp_path: Path) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True)
        recorder.start("run_1")
        assert recorder.step("run_1", 4, "Read", {}, tool_output="x") == 4
        assert recorder.step("run_1", None, "Read", {}, tool_output="y") == 5
        assert recorder.step("run_1", 2, "Read", {}, tool_output="z") == 2
        assert recorder.step("run_1", None, "Read", {}, tool_output="w") == 6
        assert [i.step_index for i in box.pending()] == [4, 5, 2, 6]


@pytest.mark.anyio
async def test_inputs_are_redacted_and_inputs_outputs_and_answers_are_capped(tmp_path: Path) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_run("run_1", [])
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True, max_output_chars=1_000)
        recorder.start("run_1")
        recorder.step(
            "run_1", None, "mcp__db__query", {"sql": "select 1", "api_key": "sk-live-abcdef123456"}, tool_output="ok"
        )
        recorder.step("run_1", None, "Read", {"file_path": "/x"}, tool_output="y" * 5_000)
        recorder.step("run_1", None, "Write", {"content": "z" * 5_000}, tool_output={"nested": ["v" * 5_000]})
        recorder.finish(
            "run_1",
            "a" * 5_000,
            duration_ms=1,
            usage=[],
            cost_usd=float("nan"),
            measured=False,
            pricing_version=PRICING_VERSION,
        )
        async with box.running():
            assert await box.flush(DEADLINE_S)
        first, second, third = fake.steps_of("run_1")
        assert first["toolInput"] == {"sql": "select 1", "api_key": "[REDACTED]"}
        assert len(second["toolOutput"]) == 1_000
        assert second["toolOutput"].endswith("chars]")
        assert isinstance(third["toolInput"], str)
        assert len(third["toolInput"]) == 1_000
        assert isinstance(third["toolOutput"], str)
        assert len(third["toolOutput"]) == 1_000
        assert json.loads(json.dumps(third)) == third
        sealed = fake.finished["run_1"]
        assert len(sealed["output"]) == 1_000
        assert (sealed["costUsd"], sealed["measured"]) == (0.0, False)


def test_the_oldest_run_is_forgotten_past_the_bound() -> None:
    recorder = Recorder(None, service_configured=False, max_runs=2)
    for run_id in ("run_1", "run_2", "run_3"):
        recorder.start(run_id)
    assert not recorder.recording("run_1")
    assert recorder.recording("run_2")
    assert recorder.recording("run_3")
    assert recorder.step("run_1", None, "Read", {}, tool_output="x") is None


@pytest.mark.anyio
async def test_held_steps_go_in_the_order_given_at_flush_and_a_step_still_held_at_finish_is_not_lost(
    tmp_path: Path,
) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        assert await service.match("run_miss", "something new") is None
        box = Outbox(outbox_dir(tmp_path), service, policy=FAST)
        recorder = Recorder(box, service_configured=True)
        async with box.running():
            recorder.start("run_miss")
            # Settled in this order (parallel calls), but made b, a; c is known to no transcript.
            assert recorder.hold("run_miss", "toolu_a", "Read", {"file_path": "/a"}, tool_output="A")
            assert recorder.hold("run_miss", "toolu_b", "Bash", {"command": "ls"}, tool_output="B", duration_ms=3)
            assert recorder.hold("run_miss", "toolu_c", "Read", {"file_path": "/c"}, tool_output="C")
            assert not recorder.hold("run_miss", "toolu_a", "Read", {"file_path": "/a"}, tool_output="again")
            assert not recorder.hold("run_miss", "toolu_bir", "mcp__bir__run_scenario", {}, tool_output="x")
            assert recorder.holds("run_miss", "toolu_b")
            assert recorder.flush("run_miss", ["toolu_b", "toolu_gone", "toolu_a"]) == 3
            assert not recorder.holds("run_miss", "toolu_b")
            assert recorder.hold("run_miss", "toolu_d", "Read", {"file_path": "/d"}, tool_output="D")
            assert finish(recorder, "run_miss")
            assert not recorder.hold("run_miss", "toolu_e", "Read", {"file_path": "/e"}, tool_output="E")
            assert await box.flush(DEADLINE_S)
        steps = fake.steps_of("run_miss")
        assert [(s["stepIndex"], s["toolOutput"]) for s in steps] == [(0, "B"), (1, "A"), (2, "C"), (3, "D")]
        assert steps[0]["durationMs"] == 3
        assert "run_miss" in fake.finished
