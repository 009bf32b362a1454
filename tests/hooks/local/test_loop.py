"""The whole loop with no account: a real control server (``live_session``) that chose the local service
because none is configured, a real ``bir-proxy`` over the demo fleet server, real V8. Turn one is
recorded and calculated; turn two, with another region, is matched by slot, derived, run directly through
the proxy and booked; the stats show the saving against turn one's own cost."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bir.cli import main
from bir.core import config
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.daemon import live_session
from bir.hooks.discovery import write_discovery
from bir.hooks.local.runtime import stats_of
from bir.hooks.local.store import Store, default_path
from bir.hooks.replay.host import ProxyHost, proxy_environment
from bir.hooks.session.switches import Switches
from tests.polling import until

pytestmark = pytest.mark.anyio
FIRST = "find the riskiest device in eu-west-1 and show its details"
SECOND = "find the riskiest device in us-east-1 and show its details"


def hook(event: str, transcript: Path, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "cwd": "/tmp/project",
        "prompt_id": "p",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def spend(transcript: Path, message_id: str, input_tokens: int, output_tokens: int) -> None:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    line = {
        "type": "assistant",
        "message": {"id": message_id, "model": "claude-opus-5-5", "role": "assistant", "usage": usage, "content": []},
    }
    with transcript.open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def content(value: object) -> list[dict[str, str]]:
    return [{"type": "text", "text": json.dumps(value)}]


async def test_turn_one_is_recorded_and_turn_two_with_another_region_replays_from_the_local_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    transcript = tmp_path / "transcript.jsonl"
    switches = lambda: Switches(False, True, None)  # noqa: E731
    async with live_session(project, switches=switches) as live:
        server = live.server
        write_discovery(server.discovery(project))
        host = ProxyHost(
            "fleet",
            f"{sys.executable} -m bir.examples.fleet_server",
            project=project,
            env=proxy_environment(Path(os.environ["BIR_HOME"])),
        )
        await host.start()
        try:
            with anyio.fail_after(20):
                await server.queue.wait_served("fleet")
            headers = {"authorization": f"Bearer {server.token}"}
            async with httpx.AsyncClient(base_url=server.url or "", headers=headers, trust_env=False) as http:
                hello = {"pid": os.getpid(), "version": "test", "tools": 1, "off": False}
                assert (await http.post("/scenario/hello", json=hello)).status_code == 200
                assert live.controller.service.base_url == "http://local.bir"

                # Turn one: a miss, recorded as the model works.
                assert (
                    await http.post("/session/prompt", json=hook("UserPromptSubmit", transcript, prompt=FIRST))
                ).json() == {}
                rows = list_devices_in("eu-west-1")
                top = max(rows, key=lambda r: r["risk"])
                calls = [
                    ("mcp__fleet__list_devices", {"region": "eu-west-1"}, content(rows)),
                    ("mcp__fleet__get_device", {"id": top["id"]}, content(device_by_id(top["id"]))),
                ]
                for n, (tool, args, response) in enumerate(calls):
                    await http.post(
                        "/tool/pre",
                        json=hook("PreToolUse", transcript, tool_name=tool, tool_input=args, tool_use_id=f"t{n}"),
                    )
                    await http.post(
                        "/tool/post",
                        json=hook(
                            "PostToolUse",
                            transcript,
                            tool_name=tool,
                            tool_input=args,
                            tool_use_id=f"t{n}",
                            tool_response=response,
                        ),
                    )
                spend(transcript, "msg_1", 30_000, 2_000)
                await http.post("/session/stop", json=hook("Stop", transcript, last_assistant_message="dev found"))
                await http.post("/session/end", json=hook("SessionEnd", transcript, reason="other"))

                store = Store(default_path(config.home()))
                try:
                    await until(
                        lambda: any(s["state"] == "ready" for s in stats_of(store, None)["scenarios"]),
                        "turn one's scenario ready",
                    )

                    # Turn two: another region, matched by slot and run directly through the proxy.
                    answer = (
                        await http.post("/session/prompt", json=hook("UserPromptSubmit", transcript, prompt=SECOND))
                    ).json()
                    assert "mcp__bir__run_scenario" in answer["hookSpecificOutput"]["additionalContext"]
                    pre = await http.post(
                        "/tool/pre",
                        json=hook(
                            "PreToolUse",
                            transcript,
                            tool_name="mcp__bir__run_scenario",
                            tool_input={},
                            tool_use_id="t9",
                        ),
                    )
                    assert pre.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
                    run = (await http.post("/scenario/run", json={"toolUseId": "t9"}, timeout=60)).json()
                    assert run["ok"] is True
                    us_top = max(list_devices_in("us-east-1"), key=lambda r: r["risk"])
                    assert us_top["id"] in run["text"]
                    await http.post(
                        "/tool/post",
                        json=hook("PostToolUse", transcript, tool_name="mcp__bir__run_scenario", tool_use_id="t9"),
                    )
                    spend(transcript, "msg_2", 3_000, 300)
                    await http.post("/session/stop", json=hook("Stop", transcript, last_assistant_message="done"))
                    await http.post("/session/end", json=hook("SessionEnd", transcript, reason="other"))

                    await until(lambda: stats_of(store, None)["totals"]["replays"] == 1, "turn two booked")
                    [line] = stats_of(store, None)["scenarios"]
                    assert line["outcomes"] == {"steered_full": 1}
                    assert line["hits"] == 1
                    assert line["measuredReplays"] == 1
                    assert line["savedUsd"] > 0
                    assert line["savedSeconds"] is not None
                    # The report carried turn two's usage: the tokens saved are turn one's less turn two's.
                    assert line["savedTokens"] == (30_000 + 2_000) - (3_000 + 300)
                    capsys.readouterr()
                    assert main(["stats", "--json"]) == 0
                    shown = json.loads(capsys.readouterr().out)
                    assert shown["totals"]["replays"] == 1
                    assert shown["totals"]["savedUsd"] == line["savedUsd"]
                    assert shown["totals"]["savedTokens"] == 28_700
                    assert main(["stats"]) == 0
                    assert "saved in all: 28,700 tokens, $" in capsys.readouterr().out
                finally:
                    store.close()
        finally:
            with anyio.CancelScope(shield=True):
                await host.stop()
