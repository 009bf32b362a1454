"""Recorded outputs of the source run (spec §8.1): per-tool FIFO queues, fetched lazily, never raising."""

from __future__ import annotations

import anyio
import pytest

from bir.core.service import ServiceClient
from bir.core.source_run import RecordedOutputs, SourceRun, fetch_recorded_outputs
from bir.core.types import RecordedStep
from tests.fakes.baseinsvc import Canned
from tests.fakes.fixtures import running_fake_service


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def step(index: int | None, tool: str, output: object) -> RecordedStep:
    return RecordedStep(step_index=index, tool_name=tool, tool_output=output)


def test_each_tool_draws_its_own_outputs_in_step_order() -> None:
    outputs = RecordedOutputs(
        [
            step(2, "mcp__fleet__get_device", "second device"),
            step(0, "mcp__fleet__list_devices", "devices"),
            step(1, "mcp__fleet__get_device", "first device"),
        ]
    )
    assert outputs.take("mcp__fleet__get_device") == "first device"
    assert outputs.take("mcp__fleet__list_devices") == "devices"
    assert outputs.take("mcp__fleet__get_device") == "second device"
    assert outputs.take("mcp__fleet__get_device") is None
    assert outputs.take("Read") is None


def test_outputs_that_are_not_strings_are_served_as_compact_json_text() -> None:
    outputs = RecordedOutputs([step(0, "mcp__fleet__list_devices", {"content": [{"type": "text", "text": "[]"}]})])
    assert outputs.take("mcp__fleet__list_devices") == '{"content":[{"type":"text","text":"[]"}]}'


def test_steps_without_an_output_or_an_index_are_handled() -> None:
    outputs = RecordedOutputs([step(None, "Read", "late"), step(0, "Read", None), step(1, "Read", "early")])
    assert len(outputs) == 2
    assert outputs.remaining("Read") == 2
    assert [outputs.take("Read"), outputs.take("Read")] == ["early", "late"]


@pytest.mark.anyio
async def test_the_source_run_is_fetched_lazily_and_once_per_turn() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_run("run_src", [{"stepIndex": 0, "tool_name": "Bash", "tool_output": {"stdout": "ok"}}])
        source = SourceRun(service, "run_src")
        assert fake.requests_to("run") == []
        first = await source.outputs()
        again = await source.outputs()
        assert first is again
        assert first.take("Bash") == '{"stdout":"ok"}'
        assert len(fake.requests_to("run")) == 1


@pytest.mark.anyio
async def test_concurrent_lookups_share_one_fetch() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_run("run_src", [{"stepIndex": 0, "toolName": "Read", "toolOutput": "text"}])
        source = SourceRun(service, "run_src")
        seen: list[RecordedOutputs] = []

        async def look() -> None:
            seen.append(await source.outputs())

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(look)
        assert all(outputs is seen[0] for outputs in seen)
        assert len(fake.requests_to("run")) == 1


@pytest.mark.anyio
async def test_a_failed_fetch_means_no_recorded_outputs_and_is_not_retried() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.forced["run"] = Canned(500, {"error": "boom"})
        source = SourceRun(service, "run_src")
        assert len(await source.outputs()) == 0
        assert len(await source.outputs()) == 0
        assert len(fake.requests_to("run")) == 1


@pytest.mark.anyio
async def test_an_unknown_run_or_a_slow_service_gives_no_recorded_outputs() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        assert len(await fetch_recorded_outputs(service, "run_missing")) == 0
        fake.add_run("run_src", [{"stepIndex": 0, "toolName": "Read", "toolOutput": "text"}])
        fake.route_latency_s["run"] = float("inf")
        assert len(await fetch_recorded_outputs(service, "run_src", time_left_s=0.3)) == 0


@pytest.mark.anyio
async def test_the_lookup_is_skipped_when_too_little_time_remains_and_may_run_later() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_run("run_src", [{"stepIndex": 0, "toolName": "Read", "toolOutput": "text"}])
        source = SourceRun(service, "run_src")
        assert len(await source.outputs(time_left_s=0.1)) == 0
        assert fake.requests_to("run") == []
        assert not source.fetched
        assert (await source.outputs(time_left_s=5.0)).take("Read") == "text"


@pytest.mark.anyio
async def test_no_service_or_no_run_id_means_no_recorded_outputs() -> None:
    assert len(await SourceRun(None, "run_src").outputs()) == 0
    async with ServiceClient("http://127.0.0.1:9", "t") as service:
        assert len(await SourceRun(service, None).outputs()) == 0
