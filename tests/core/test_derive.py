"""Parameter derivation (spec §16.3): the key path, the service path, the samples, and every fallback."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from bir.core import log
from bir.core.derive import (
    Derivation,
    derive_parameters,
    extract_json_object,
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


# --- tolerant JSON extraction ---------------------------------------------------------------------


def test_a_fenced_json_block_is_extracted() -> None:
    text = 'Here you go:\n```json\n{"region": "us-east-1", "limit": 5}\n```\nAnything else?'
    assert extract_json_object(text) == {"region": "us-east-1", "limit": 5}


def test_a_bare_json_reply_is_extracted() -> None:
    assert extract_json_object('  {"region": "ap-south-1"}\n') == {"region": "ap-south-1"}


def test_json_inside_prose_is_the_first_balanced_object_that_parses() -> None:
    text = 'I think {this is not json} but the answer is {"region": "a}b", "nested": {"x": 1}} and {"y": 2}.'
    assert extract_json_object(text) == {"region": "a}b", "nested": {"x": 1}}


def test_undefined_reads_as_null_but_not_inside_strings() -> None:
    text = '{"region": undefined, "note": "undefined stays text", "limit": 3}'
    assert extract_json_object(text) == {"region": None, "note": "undefined stays text", "limit": 3}


def test_a_reply_without_an_object_gives_none() -> None:
    assert extract_json_object("I could not find a region in the request.") is None
    assert extract_json_object('["region"]') is None
    assert extract_json_object("{ unbalanced") is None


def test_nan_is_not_a_parameter_value() -> None:
    assert extract_json_object('{"limit": NaN}') == {"limit": None}


# --- the key path, over the fake Messages endpoint ------------------------------------------------


async def derive_with_key(
    anthropic: FakeAnthropic, scenario: Scenario, prompt: str = "riskiest device in us-east-1", **kwargs: Any
) -> Derivation:
    options: dict[str, Any] = {"api_key": anthropic.api_key, "service": None, "timeout_s": 5.0}
    options.update(kwargs)
    return await derive_parameters(prompt=prompt, scenario=scenario, anthropic_url=anthropic.messages_url, **options)


@pytest.mark.anyio
async def test_a_key_derives_from_a_fenced_reply_and_prices_its_usage() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = '```json\n{"region": "us-east-1", "limit": 50}\n```'
        anthropic.usage = {"input_tokens": 1000, "output_tokens": 200}
        result = await derive_with_key(anthropic, fleet())
    assert result == Derivation({"region": "us-east-1", "limit": 50}, result.cost_usd, True, (), "anthropic", None)
    assert result.cost_usd == pytest.approx(0.002)
    [seen] = anthropic.requests
    assert seen.headers["x-api-key"] == anthropic.api_key
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.body["model"] == "claude-haiku-4-5-20251001"


@pytest.mark.anyio
async def test_the_extraction_prompt_names_the_intent_each_parameter_and_the_request() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = '{"region": "us-east-1"}'
        await derive_with_key(anthropic, fleet(), prompt="riskiest device in us-east-1")
    [prompt] = anthropic.prompts()
    for expected in (
        "find the riskiest device in a region",
        '"region" (target): the fleet region. Recorded value: "eu-west-1"',
        '"limit" (setting): how many devices to list. Recorded value: 200',
        "riskiest device in us-east-1",
        'keys are exactly "region", "limit"',
    ):
        assert expected in prompt


@pytest.mark.anyio
async def test_a_prose_wrapped_reply_fills_settings_from_samples_and_drops_unknown_keys() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = 'Sure. The values are {"region": "us-east-1", "limit": null, "extra": 1} as asked.'
        result = await derive_with_key(anthropic, fleet())
    assert result.params == {"region": "us-east-1", "limit": 200}
    assert result.missing == ()


@pytest.mark.anyio
async def test_a_null_or_absent_target_is_named_missing_never_guessed() -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = '{"region": undefined}'
        result = await derive_with_key(anthropic, fleet(), prompt="riskiest device please")
    assert result.params == {"region": None, "limit": 200}
    assert result.missing == ("region",)
    assert result.derived is True


@pytest.mark.anyio
async def test_the_prompt_live_call_and_recent_results_are_redacted_before_leaving() -> None:
    def redact(text: str) -> str:
        return text.replace("hunter2", "[REDACTED]")

    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = '{"region": "us-east-1"}'
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
        anthropic.reply_text = '{"region": "x"}'
        anthropic.usage = {"input_tokens": 1_000_000, "output_tokens": 200_000}
        priced = await derive_with_key(anthropic, fleet())
        anthropic.usage = {"input_tokens": "lots", "output_tokens": -3}
        garbage = await derive_with_key(anthropic, fleet())
    assert priced.cost_usd == pytest.approx(2.0)
    assert garbage.cost_usd == 0.0


@pytest.mark.anyio
async def test_a_model_the_table_does_not_price_costs_nothing_and_says_so_once(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = '{"region": "x"}'
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
        anthropic.reply_text = '{"region": "x"}'
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
async def test_a_reply_without_json_falls_back_but_still_costs_its_tokens(logged: Logged) -> None:
    async with running_fake_anthropic() as anthropic:
        anthropic.reply_text = "I cannot tell which region you mean."
        anthropic.usage = {"input_tokens": 1000, "output_tokens": 0}
        result = await derive_with_key(anthropic, fleet())
    assert (result.source, result.reason, result.derived) == ("samples", "anthropic_not_json", False)
    assert result.cost_usd == pytest.approx(0.001)
    assert result.params == {"region": None, "limit": 200}
    assert events(logged, "replay.derive_failed")


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
        anthropic.reply_text = '{"region": "us-east-1"}'
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
    assert resolve_api_key(env) == "sk-derive"


def test_anthropic_api_key_is_ignored_and_logged_unless_allowed(logged: Logged) -> None:
    assert resolve_api_key({"ANTHROPIC_API_KEY": "sk-claude-code"}) is None
    assert len(events(logged, "derive.api_key_ignored")) == 1
    assert "sk-claude-code" not in json.dumps(logged())


def test_anthropic_api_key_is_used_with_the_opt_in() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-claude-code", "BIR_USE_ANTHROPIC_API_KEY": "1"}
    assert resolve_api_key(env) == "sk-claude-code"


def test_no_key_at_all_is_none_without_a_log_line(logged: Logged) -> None:
    assert resolve_api_key({}) is None
    assert logged() == []


def test_the_process_environment_is_read_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("BIR_DERIVE_API_KEY", "sk-env")
    assert resolve_api_key() == "sk-env"
