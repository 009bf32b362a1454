"""Parameter derivation (spec §16.3): the key path, the service path, the samples, and every fallback."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from bir.core import config, log
from bir.core.derive import (
    ANSWER_TOOL,
    Derivation,
    derive_parameters,
    resolve_api_key,
)
from bir.core.service import ServiceClient
from bir.core.types import Scenario, parse_scenario
from tests.fakes.anthropicsvc import FakeAnthropic
from tests.fakes.baseinsvc import Canned
from tests.fakes.fixtures import running_fake_anthropic, running_fake_service

Logged = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def logged() -> Iterator[Logged]:
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        log.set_stream(None)


def events(logged: Logged, name: str) -> list[dict[str, Any]]:
    return [line for line in logged() if line["event"] == name]


def fleet(params: Mapping[str, Any] | None = None) -> Scenario:
    return parse_scenario(
        {
            "id": "scn_fleet",
            "intent": "find the riskiest device in a region",
            "paramsObject": params
            if params is not None
            else {
                "region": {"sampleValue": "eu-west-1", "description": "the fleet region", "role": "target"},
                "limit": {"sampleValue": 200, "description": "how many devices to list", "role": "setting"},
            },
            "steps": [{"stepIndex": 0, "toolName": "mcp__fleet__list_devices"}],
        }
    )


# --- the key path, over the fake Messages endpoint ------------------------------------------------


async def derive_with_key(
    anthropic: FakeAnthropic, scenario: Scenario, prompt: str = "riskiest device in us-east-1", **kwargs: Any
) -> Derivation:
    options: dict[str, Any] = {"api_key": anthropic.api_key, "service": None, "timeout_s": 5.0}
    options.update(kwargs)
    return await derive_parameters(prompt=prompt, scenario=scenario, anthropic_url=anthropic.messages_url, **options)


def message(content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any]) -> Canned:
    """A whole Messages reply with this content, as the real API shapes one."""
    body = {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-haiku-4-5-20251001"}
    return Canned(200, {**body, "content": content, "stop_reason": stop_reason, "usage": usage})


@pytest.mark.anyio
async def test_a_key_derives_from_the_forced_tool_answer_and_prices_its_usage() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"region": "us-east-1", "limit": 50}
        anthropic.usage = {"input_tokens": 1000, "output_tokens": 200}
        result = await derive_with_key(anthropic, fleet())
    assert result == Derivation({"region": "us-east-1", "limit": 50}, result.cost_usd, True, (), "anthropic", None)
    assert result.cost_usd == pytest.approx(0.002)
    [seen] = anthropic.requests
    assert seen.headers["x-api-key"] == anthropic.api_key
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.body["model"] == "claude-haiku-4-5-20251001"


@pytest.mark.anyio
async def test_the_call_forces_one_tool_whose_schema_is_the_params_object() -> None:
    async with running_fake_anthropic() as anthropic:
        await derive_with_key(anthropic, fleet(), prompt="riskiest device in us-east-1")
    [seen] = anthropic.requests
    assert seen.body["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL, "disable_parallel_tool_use": True}
    [tool] = seen.body["tools"]
    assert tool["name"] == ANSWER_TOOL
    schema = tool["input_schema"]
    assert (schema["type"], schema["required"], schema["additionalProperties"]) == (
        "object",
        ["region", "limit"],
        False,
    )
    region, limit = schema["properties"]["region"], schema["properties"]["limit"]
    # Every parameter may be null; a number is any number, whatever the sample was.
    assert (region["type"], limit["type"]) == (["string", "null"], ["number", "null"])
    assert "the fleet region" in region["description"]
    assert "null when the request does not name it" in region["description"]
    assert "null keeps its recorded value" in limit["description"]


@pytest.mark.anyio
async def test_the_extraction_prompt_names_the_intent_each_parameter_and_the_request() -> None:
    async with running_fake_anthropic() as anthropic:
        await derive_with_key(anthropic, fleet(), prompt="riskiest device in us-east-1")
    [prompt] = anthropic.prompts()
    for expected in (
        "find the riskiest device in a region",
        '"region" (target): the fleet region. Recorded value: "eu-west-1"',
        '"limit" (setting): how many devices to list. Recorded value: 200',
        "riskiest device in us-east-1",
        f'Call {ANSWER_TOOL} once; its keys are exactly "region", "limit"',
    ):
        assert expected in prompt


@pytest.mark.anyio
async def test_a_null_setting_takes_its_sample_and_keys_outside_the_schema_are_dropped() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"region": "us-east-1", "limit": None, "extra": 1}
        result = await derive_with_key(anthropic, fleet())
    assert result.params == {"region": "us-east-1", "limit": 200}
    assert result.missing == ()


@pytest.mark.anyio
@pytest.mark.parametrize("answer", [{"region": None}, {}], ids=["null", "absent"])
async def test_a_null_or_absent_target_is_named_missing_never_guessed(answer: dict[str, Any]) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = answer
        result = await derive_with_key(anthropic, fleet(), prompt="riskiest device please")
    assert result.params == {"region": None, "limit": 200}
    assert result.missing == ("region",)
    assert result.derived is True


@pytest.mark.anyio
async def test_a_name_the_api_refuses_as_a_property_key_is_asked_under_an_alias_and_read_back() -> None:
    params = {
        "file path": {"sampleValue": "a.txt", "description": "the file", "role": "target"},
        "param_0": {"sampleValue": 1, "description": "a count", "role": "setting"},
        "x" * 65: {"sampleValue": True, "description": "a flag", "role": "setting"},
    }
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"param_0_": "b.txt", "param_0": 2, "param_2": False}
        result = await derive_with_key(anthropic, fleet(params))
    [seen] = anthropic.requests
    assert list(seen.body["tools"][0]["input_schema"]["properties"]) == ["param_0_", "param_0", "param_2"]
    assert '"file path" (target): the file. Recorded value: "a.txt" (answer it as param_0_)' in anthropic.prompts()[0]
    assert result.params == {"file path": "b.txt", "param_0": 2, "x" * 65: False}
    assert (result.source, result.missing) == ("anthropic", ())


@pytest.mark.anyio
async def test_the_prompt_live_call_and_recent_results_are_redacted_before_leaving() -> None:
    def redact(text: str) -> str:
        return text.replace("hunter2", "[REDACTED]")

    async with running_fake_anthropic() as anthropic:
        await derive_with_key(
            anthropic,
            fleet(),
            prompt="us-east-1 with password hunter2",
            live_call={"toolName": "mcp__fleet__list_devices", "toolInput": {"token": "hunter2"}},
            recent_results=["hunter2 was here"],
            redact=redact,
        )
    [prompt] = anthropic.prompts()
    assert "hunter2" not in prompt
    assert prompt.count("[REDACTED]") == 3


@pytest.mark.anyio
async def test_the_call_is_priced_from_the_dated_table_at_haikus_one_and_five_dollars_per_million() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"region": "x"}
        anthropic.usage = {"input_tokens": 1_000_000, "output_tokens": 200_000}
        priced = await derive_with_key(anthropic, fleet())
        anthropic.usage = {"input_tokens": "lots", "output_tokens": -3}
        garbage = await derive_with_key(anthropic, fleet())
    assert priced.cost_usd == pytest.approx(2.0)
    assert garbage.cost_usd == 0.0


@pytest.mark.anyio
async def test_a_model_the_table_does_not_price_costs_nothing_and_says_so_once(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"region": "x"}
        result = await derive_with_key(anthropic, fleet(), model="claude-unknown-9")
    assert (result.source, result.cost_usd) == ("anthropic", 0.0)
    [line] = events(logged, "replay.derive_unpriced")
    assert line["model"] == "claude-unknown-9"


@pytest.mark.anyio
async def test_an_injected_price_function_prices_the_reply() -> None:
    priced: list[tuple[str, Mapping[str, Any]]] = []

    def price(model: str, usage: Mapping[str, Any]) -> float:
        priced.append((model, usage))
        return 0.5

    async with running_fake_anthropic() as anthropic:
        anthropic.tool_input = {"region": "x"}
        result = await derive_with_key(anthropic, fleet(), price=price, model="claude-test")
    assert result.cost_usd == 0.5
    assert priced == [("claude-test", anthropic.usage)]


@pytest.mark.anyio
async def test_a_server_error_falls_back_to_samples_with_a_reason_and_a_failed_line(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.forced = Canned(500, {"type": "error", "error": {"type": "api_error", "message": "x" * 10_000}})
        result = await derive_with_key(anthropic, fleet())
    assert result == Derivation(
        {"region": None, "limit": 200}, 0.0, False, ("region",), "samples", "anthropic_http_500"
    )
    [line] = events(logged, "replay.derive_failed")
    assert (line["source"], line["reason"]) == ("anthropic", "anthropic_http_500")
    assert len(line["error"]) <= 300


@pytest.mark.anyio
async def test_a_wrong_key_falls_back_to_samples() -> None:
    async with running_fake_anthropic() as anthropic:
        result = await derive_with_key(anthropic, fleet(), api_key="sk-wrong")
    assert (result.source, result.reason) == ("samples", "anthropic_http_401")


@pytest.mark.anyio
async def test_a_reply_that_does_not_call_the_tool_falls_back_but_still_costs_its_tokens(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        text = [{"type": "text", "text": 'I cannot tell which region you mean: {"region": "us-east-1"}'}]
        anthropic.forced = message(text, "end_turn", {"input_tokens": 1000, "output_tokens": 0})
        result = await derive_with_key(anthropic, fleet())
    assert (result.source, result.reason, result.derived) == ("samples", "anthropic_no_tool_use", False)
    assert result.cost_usd == pytest.approx(0.001)
    # A JSON object in prose is not an answer: nothing is salvaged from text.
    assert result.params == {"region": None, "limit": 200}
    [line] = events(logged, "replay.derive_failed")
    assert "stop_reason end_turn" in line["error"]


@pytest.mark.anyio
async def test_a_tool_answer_cut_at_max_tokens_is_no_answer() -> None:
    async with running_fake_anthropic() as anthropic:
        block = {"type": "tool_use", "id": "toolu_1", "name": ANSWER_TOOL, "input": {"region": "us-e"}}
        anthropic.forced = message([block], "max_tokens", {"input_tokens": 10, "output_tokens": 1024})
        result = await derive_with_key(anthropic, fleet())
    assert (result.source, result.reason) == ("samples", "anthropic_no_tool_use")
    assert result.cost_usd > 0


@pytest.mark.anyio
async def test_a_reply_whose_content_is_not_the_messages_shape_still_costs_its_tokens() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.forced = Canned(200, {"content": "not a list", "usage": {"input_tokens": 1000}})
        result = await derive_with_key(anthropic, fleet())
    assert (result.source, result.reason) == ("samples", "anthropic_no_tool_use")
    assert result.cost_usd == pytest.approx(0.001)


@pytest.mark.anyio
async def test_a_messages_answer_that_is_not_json_falls_back() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.forced = Canned(200, raw=b"<html>gateway</html>")
        result = await derive_with_key(anthropic, fleet())
    assert (result.source, result.reason) == ("samples", "anthropic_bad_answer")


@pytest.mark.anyio
async def test_a_slow_messages_call_times_out_to_samples_with_a_timeout_line(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.latency_s = float("inf")
        result = await derive_with_key(anthropic, fleet(), timeout_s=0.3)
    assert (result.source, result.reason, result.missing) == ("samples", "anthropic_timeout", ("region",))
    assert result.params == {"region": None, "limit": 200}
    [line] = events(logged, "replay.derive_timeout")
    assert line["source"] == "anthropic"
    assert not events(logged, "replay.derive_failed")


# --- the service path -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_service_answer_is_renormalised_against_the_scenarios_own_schema() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_scenario({"id": "scn_fleet"})
        fake.derive_answers["scn_fleet"] = Canned(
            200,
            {
                "params": {"region": None, "limit": None, "stale": "x"},
                "derived": True,
                "missing": [],
                "costUsd": 0.0003,
            },
        )
        result = await derive_parameters(
            prompt="riskiest device", scenario=fleet(), api_key=None, service=service, timeout_s=5.0
        )
    assert result == Derivation({"region": None, "limit": 200}, 0.0003, True, ("region",), "service", None)


@pytest.mark.anyio
async def test_the_service_receives_the_redacted_turn() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_scenario({"id": "scn_fleet"})
        fake.derive_answers["scn_fleet"] = Canned(200, {"params": {"region": "us-east-1"}, "derived": True})
        result = await derive_parameters(
            prompt="us-east-1 sk-secret",
            scenario=fleet(),
            api_key=None,
            service=service,
            timeout_s=5.0,
            live_call={"toolName": "Bash", "toolInput": {"command": "echo sk-secret"}},
            redact=lambda text: text.replace("sk-secret", "***"),
        )
        [seen] = fake.requests_to("derive")
    assert result.params == {"region": "us-east-1", "limit": 200}
    assert seen.body["prompt"] == "us-east-1 ***"
    assert json.loads(seen.body["liveCall"]) == {"toolName": "Bash", "toolInput": {"command": "echo ***"}}
    assert "recentResults" not in seen.body


@pytest.mark.anyio
async def test_a_declining_service_falls_back_to_samples(logged: Logged) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_scenario({"id": "scn_fleet"})
        result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=service, timeout_s=5.0)
    assert result == Derivation({"region": None, "limit": 200}, 0.0, False, ("region",), "samples", "service_declined")
    assert events(logged, "replay.derive_failed")[0]["reason"] == "service_declined"


@pytest.mark.anyio
async def test_a_service_500_falls_back_to_samples() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.forced["derive"] = Canned(500, {"error": "boom"})
        result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=service, timeout_s=5.0)
    assert (result.source, result.reason) == ("samples", "service_declined")


@pytest.mark.anyio
async def test_a_service_answer_without_params_falls_back() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_scenario({"id": "scn_fleet"})
        fake.derive_answers["scn_fleet"] = Canned(200, {"derived": True})
        result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=service, timeout_s=5.0)
    assert (result.source, result.reason) == ("samples", "service_bad_answer")


@pytest.mark.anyio
async def test_a_slow_service_times_out_to_samples(logged: Logged) -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, fake.token) as service:
        fake.add_scenario({"id": "scn_fleet"})
        fake.route_latency_s["derive"] = float("inf")
        result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=service, timeout_s=0.3)
    assert (result.source, result.reason) == ("samples", "service_timeout")
    assert [line["source"] for line in events(logged, "replay.derive_timeout")] == ["service"]


@pytest.mark.anyio
async def test_a_key_is_preferred_over_the_service() -> None:
    async with (
        running_fake_service() as fake,
        running_fake_anthropic() as anthropic,
        ServiceClient(fake.url, fake.token) as service,
    ):
        anthropic.tool_input = {"region": "us-east-1"}
        result = await derive_with_key(anthropic, fleet(), service=service)
        assert result.source == "anthropic"
        assert fake.requests_to("derive") == []


# --- no parameters, and neither path --------------------------------------------------------------


@pytest.mark.anyio
async def test_a_scenario_without_parameters_derives_nothing_for_free() -> None:
    async with running_fake_anthropic() as anthropic:
        result = await derive_with_key(anthropic, fleet(params={}))
    assert result == Derivation({}, 0.0, False, (), "none", None)
    assert anthropic.requests == []


@pytest.mark.anyio
async def test_with_neither_a_key_nor_a_service_settings_take_samples_and_targets_are_missing() -> None:
    result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=None, timeout_s=1.0)
    assert result == Derivation({"region": None, "limit": 200}, 0.0, False, ("region",), "samples", "no_derive_key")


@pytest.mark.anyio
async def test_an_unconfigured_service_counts_as_no_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    async with ServiceClient() as service:
        result = await derive_parameters(prompt="p", scenario=fleet(), api_key=None, service=service, timeout_s=1.0)
    assert (result.source, result.reason) == ("samples", "no_derive_key")


@pytest.mark.anyio
async def test_a_redactor_that_raises_costs_the_derivation_not_the_turn(logged: Logged) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("redactor bug")

    result = await derive_parameters(
        prompt="p", scenario=fleet(), api_key="sk-x", service=None, timeout_s=1.0, redact=broken
    )
    assert (result.source, result.reason) == ("samples", "anthropic_internal_error")
    assert events(logged, "replay.derive_failed")[0]["reason"] == "internal"


# --- which key ------------------------------------------------------------------------------------


def test_the_derive_key_wins() -> None:
    env = {"BIR_DERIVE_API_KEY": "sk-derive", "ANTHROPIC_API_KEY": "sk-claude-code"}
    assert resolve_api_key(config.load(env), env) == "sk-derive"


def test_anthropic_api_key_is_ignored_and_logged_unless_allowed(logged: Logged) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-claude-code"}
    assert resolve_api_key(config.load(env), env) is None
    assert len(events(logged, "derive.api_key_ignored")) == 1
    assert "sk-claude-code" not in json.dumps(logged())


def test_anthropic_api_key_is_used_with_the_opt_in() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-claude-code", "BIR_USE_ANTHROPIC_API_KEY": "1"}
    assert resolve_api_key(config.load(env), env) == "sk-claude-code"


def test_no_key_at_all_is_none_without_a_log_line(logged: Logged) -> None:
    assert resolve_api_key(config.load({}), {}) is None
    assert logged() == []


def test_the_process_environment_is_read_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("BIR_DERIVE_API_KEY", "sk-env")
    assert resolve_api_key(config.load()) == "sk-env"
