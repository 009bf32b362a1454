"""One output shape for an MCP tool whoever saw the call, one cap, and built-ins as the host gave them."""

from __future__ import annotations

import json

import pytest

from bir.core.tool_output import MAX_OUTPUT_CHARS, call_result, output_text, step_output_text

CONTENT = [{"type": "text", "text": '[{"id":"dev-1","risk":3}]'}]


def test_a_proxys_result_and_a_hooks_content_array_give_the_same_text() -> None:
    from_proxy = {"content": CONTENT, "isError": False}
    from_hook = CONTENT
    assert step_output_text("mcp__fleet__list_devices", from_proxy) == step_output_text(
        "mcp__fleet__list_devices", from_hook
    )
    assert json.loads(step_output_text("mcp__fleet__list_devices", from_hook)) == {"content": CONTENT, "isError": False}


def test_the_canonical_result_is_content_and_is_error_only_and_says_is_error_always() -> None:
    assert call_result({"content": CONTENT, "structuredContent": {"n": 1}, "_meta": {"x": 1}}) == {
        "content": CONTENT,
        "isError": False,
    }
    assert call_result({"content": [], "isError": True}) == {"content": [], "isError": True}


def test_a_tool_with_structured_output_gives_the_same_text_through_a_proxy_and_through_a_hook() -> None:
    # What the host's hook never shows (structuredContent) is in no source's text, so no body can need it.
    issues = {"issues": [{"key": "WEB-101", "priority": 41}]}
    content = [{"type": "text", "text": json.dumps(issues)}]
    from_proxy = {"content": content, "structuredContent": issues, "isError": False}
    assert step_output_text("mcp__tracker__search_issues", from_proxy) == step_output_text(
        "mcp__tracker__search_issues", content
    )


@pytest.mark.parametrize("other", [{"error": "boom"}, "plain text", None, {"content": "not a list"}])
def test_what_is_not_a_call_result_passes_as_it_came(other: object) -> None:
    assert call_result(other) == other


def test_a_built_in_tools_response_is_recorded_as_the_host_gave_it() -> None:
    response = {"stdout": "hi", "stderr": "", "interrupted": False}
    assert json.loads(step_output_text("Bash", response)) == response
    assert json.loads(step_output_text("Read", [{"type": "text", "text": "x"}])) == [{"type": "text", "text": "x"}]


def test_every_output_is_redacted_and_capped_at_one_limit() -> None:
    text = output_text({"token": "sk-ant-api03-" + "a" * 40, "big": "x" * (2 * MAX_OUTPUT_CHARS)})
    assert len(text) <= MAX_OUTPUT_CHARS
    assert "sk-ant-api03-" + "a" * 40 not in text
