"""The proxy's two rewrites (spec §7.1), as pure functions."""

from __future__ import annotations

import json
from typing import Any

from bir.hooks.api import CALL_ID_KEY
from bir.proxy.rewrite import (
    declare_call_id,
    rewrite_tools_list_response,
    strip_call_id,
    strip_tools_call_request,
)


def _tools(*schemas: Any) -> dict[str, Any]:
    return {"tools": [{"name": f"t{i}", "inputSchema": s} for i, s in enumerate(schemas)]}


def test_every_tool_declares_the_call_id_as_a_reserved_string() -> None:
    result = _tools({"type": "object", "properties": {"q": {"type": "string"}}}, {"type": "object"})
    assert declare_call_id(result)
    for tool in result["tools"]:
        assert tool["inputSchema"]["properties"][CALL_ID_KEY] == {
            "type": "string",
            "description": "Reserved. Leave unset.",
        }


def test_declaring_leaves_additional_properties_and_required_as_the_upstream_had_them() -> None:
    strict = {"type": "object", "properties": {"q": {}}, "required": ["q"], "additionalProperties": False}
    loose = {"type": "object", "properties": {}}
    result = _tools(strict, loose)
    declare_call_id(result)
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["q"]
    assert "additionalProperties" not in loose
    assert "required" not in loose


def test_a_result_that_is_not_a_tool_list_is_left_alone() -> None:
    odds: list[Any] = [None, [], {"tools": "x"}, {"tools": [1, {"name": "n"}]}, _tools({"type": "string"})]
    for odd in odds:
        before = json.dumps(odd)
        assert not declare_call_id(odd)
        assert json.dumps(odd) == before


def test_a_tool_that_already_declares_the_key_is_not_changed() -> None:
    result = _tools({"type": "object", "properties": {CALL_ID_KEY: {"type": "string", "description": "mine"}}})
    assert not declare_call_id(result)
    assert result["tools"][0]["inputSchema"]["properties"][CALL_ID_KEY]["description"] == "mine"


def test_stripping_takes_the_call_id_out_and_keeps_the_rest() -> None:
    params = {"name": "echo", "arguments": {"message": "hi", CALL_ID_KEY: "call-7"}}
    assert strip_call_id(params) == (True, "call-7")
    assert params == {"name": "echo", "arguments": {"message": "hi"}}


def test_an_unusable_call_id_is_dropped_all_the_same() -> None:
    for value in (7, "", "x" * 300, None, {"a": 1}):
        params = {"name": "echo", "arguments": {CALL_ID_KEY: value}}
        assert strip_call_id(params) == (True, None)
        assert params["arguments"] == {}


def test_a_call_without_the_key_is_not_touched() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":1}}}'
    assert strip_tools_call_request(line) is None
    assert strip_call_id({"arguments": "not a dict"}) == (False, None)


def test_a_stripped_request_keeps_its_id_and_everything_else() -> None:
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "é", CALL_ID_KEY: "c1"}, "_meta": {"k": 1}},
        }
    ).encode()
    stripped = strip_tools_call_request(line)
    assert stripped is not None
    new_line, call_id, arguments = stripped
    assert call_id == "c1"
    assert arguments == {"message": "é"}
    assert CALL_ID_KEY.encode() not in new_line
    assert json.loads(new_line) == {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "é"}, "_meta": {"k": 1}},
    }


def test_a_tools_list_line_is_rewritten_only_when_something_changes() -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 2, "result": _tools({"type": "object"})}).encode()
    rewritten = rewrite_tools_list_response(line)
    assert rewritten is not None
    assert CALL_ID_KEY in json.loads(rewritten)["result"]["tools"][0]["inputSchema"]["properties"]
    assert rewrite_tools_list_response(rewritten) is None
    assert rewrite_tools_list_response(b"not json") is None
