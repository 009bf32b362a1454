"""``bir demo [--json] [--keep]``: the README's main job, the whole loop on this machine, offline, with no account.

A first prompt is recorded, its scenario calculated and self-checked, a second prompt with another
region matched by slot, derived, run directly through ``bir-proxy`` and booked, and the saving printed.
It runs the code a live session runs: a control server (``live_session``, as ``bir-hooks`` serves it)
on the local service, the hooks as ``bir-hook`` commands, the demo fleet server behind a real
``bir-proxy``, ``run_scenario`` served by a real ``bir-scenario``, the bodies in real V8 workers. The
host's part is ``demo_host.DemoHost``; the model's choices are a script, and its usage is counted, not
spent. Everything happens in a temporary ``BIR_HOME`` with every other ``BIR_*`` variable unset, so
the user's home, sign-in and settings are never read or touched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from bir.core import config, installed
from bir.core.bundle import fenced_output
from bir.core.exits import EXIT_FAILED, EXIT_OK
from bir.core.log import logging_to, logs_dir
from bir.core.paths import project_key
from bir.core.truncate import cut
from bir.hooks.commands.demo_host import CONTEXT_TOKENS, MODEL, DemoHost, HostError, text_of
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.result import CommandResult, Subparsers, add_command, json_flag, print_result

if TYPE_CHECKING:
    from bir.hooks.local.store import RunRow, Store

FIRST: Final = "find the riskiest device in eu-west-1 and show its details"
SECOND: Final = "find the riskiest device in us-east-1 and show its details"
# Each wait is on something another process writes (the outbox's send, a calculation, a booking).
STAGE_TIMEOUT_S: Final = 60.0
POLL_S: Final = 0.05
_PICKS: Final = {"max": "the row with the highest {}", "min": "the row with the lowest {}"}


class DemoFailed(Exception):
    """A stage did not do what the loop needs; the message says which and why."""


def add_parser(sub: Subparsers) -> None:
    """Register ``bir demo``."""
    demo = add_command(
        sub,
        "demo",
        "the whole loop offline, with no account: record a prompt, calculate its scenario, replay another",
        ["bir demo", "bir demo --keep", "bir demo --json"],
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the temporary BIR_HOME (its store, logs and transcripts) to look at"
    )
    json_flag(demo, "print one JSON document: every stage, then the savings")
    demo.set_defaults(run=run)


@contextlib.contextmanager
def _isolated(home: Path) -> Iterator[None]:
    """This process's ``BIR_*`` variables replaced by the demo's own for the block, then put back."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("BIR_")}
    for name in saved:
        del os.environ[name]
    os.environ["BIR_HOME"] = str(home)
    os.environ["BIR_SERVICE"] = "local"
    try:
        yield
    finally:
        for name in [k for k in os.environ if k.startswith("BIR_")]:
            del os.environ[name]
        os.environ.update(saved)


async def _until(what: str, found: Callable[[], Any], progress: Callable[[str], None] = lambda _: None) -> Any:
    """``found()``'s first true value, polled: what it reads another process writes."""
    progress(f"waiting for {what}…")
    with anyio.move_on_after(STAGE_TIMEOUT_S):
        while True:
            value = found()
            if value:
                return value
            await anyio.sleep(POLL_S)
    raise DemoFailed(f"{what}: not within {STAGE_TIMEOUT_S:.0f} s")


def _j(value: object, limit: int = 160) -> str:
    return cut(json.dumps(value, ensure_ascii=False), limit)


def _shown(output: str) -> str:
    """A fleet tool's output in a few words: a listing's size, a device's name and risk."""
    try:
        value = json.loads(output)
    except ValueError:
        return cut(output, 120)
    if isinstance(value, list):
        return f"{len(value)} devices"
    if isinstance(value, dict) and "name" in value and "risk" in value:
        return f"{value['name']}, risk {value['risk']}"
    return _j(value, 120)


def _device(content: list[dict[str, Any]]) -> str:
    return _shown(text_of(content))


def _step_outputs(text: str) -> list[str]:
    """Each step's output in ``run_scenario``'s answer (``### Step i/n — tool``, its arguments line, then
    the output between its fence lines), for showing it; what the answer says after the steps is not an output."""
    outputs = []
    for section in re.split(r"^### Step \d+/\d+ — .*$", text, flags=re.MULTILINE)[1:]:
        lines = section.strip("\n").split("\n")
        body = lines[1:] if lines and lines[0].startswith(("arguments: ", "command: ")) else lines
        # The output sits between its bundle's two fence lines (outputs are data, issue 16).
        inner = fenced_output(body)
        outputs.append((inner if inner is not None else "\n".join(body).split("\n\n")[0]).strip())
    return outputs


class Demo:
    """The stages, in order, each said to a person as it happens (``say``) and kept for ``--json``."""

    def __init__(
        self, root: Path, say: Callable[[str], None], progress: Callable[[str], None] = lambda _: None
    ) -> None:
        self.root = root
        self.home = root / "home"
        self.project = root / "project"
        self.say = say
        # What the loop waits on now (a terminal's progress line); ``say`` tells what happened.
        self.progress = progress
        self.stages: dict[str, Any] = {}

    async def run(self) -> None:
        from bir.hooks.daemon import live_session
        from bir.hooks.discovery import remove_discovery, write_discovery
        from bir.hooks.local.store import Store, default_path

        self.project.mkdir(parents=True)
        # What `bir install --replay` records for a project with one wrapped server (its settings files
        # are Claude Code's, which this demo plays): replay on, fleet behind bir-proxy.
        installed.update(self.project, self.home, replay=True, install={"localServers": ["fleet"]})
        errlog = (logs_dir(self.home) / "demo-servers.log").open("a", encoding="utf-8")
        self.progress("starting the control server and its evaluator pool…")
        try:
            async with live_session(self.project) as live:
                write_discovery(live.server.discovery(self.project))
                self.progress("starting bir-scenario and the fleet server behind bir-proxy…")
                try:
                    async with DemoHost(
                        self.project, self.home, fleet_log=self.root / "fleet-calls.jsonl", errlog=errlog
                    ) as host:
                        with anyio.fail_after(STAGE_TIMEOUT_S):
                            await live.server.queue.wait_served("fleet")
                        store = Store(default_path(self.home))
                        try:
                            self._set_up(str(live.controller.service.base_url), store)
                            run_id = await self._turn_one(host, store)
                            scenario_id = await self._calculated(store, run_id)
                            ticket = await self._turn_two(host, store, scenario_id)
                            await self._booked(store, scenario_id, ticket)
                        finally:
                            store.close()
                finally:
                    remove_discovery(self.project)
        finally:
            errlog.close()

    def _set_up(self, service_url: str, store: Store) -> None:
        self.stages["setup"] = {
            "birHome": str(self.home),
            "project": str(self.project),
            "service": service_url,
            "store": str(store.path),
        }
        self.say(
            "1. Set up: a project with the demo fleet MCP server behind bir-proxy, the bir MCP server, and its\n"
            f"   control server on the local service (the store: {store.path}).\n"
            "   This process plays Claude Code: it runs bir's hooks (bir-hook) and calls the MCP tools. The\n"
            "   model's part is a script; its tokens are counted as a Claude Code request would carry them."
        )

    async def _turn_one(self, host: DemoHost, store: Store) -> str:
        self.say(f'\n2. Turn one: "{FIRST}"')
        turn = host.begin(str(uuid.uuid4()), FIRST)
        began = time.monotonic()
        self.progress("turn one: the session's first hooks (bir-hook)…")
        await host.hook("SessionStart", turn, source="startup")
        answer = await host.hook("UserPromptSubmit", turn, prompt=FIRST)
        if answer:
            raise DemoFailed(f"turn one was answered as a hit in an empty store: {_j(answer)}")
        self.say("   no scenario matches (the store is empty): bir records the turn")
        calls = []
        listing = host.tool_use("mcp__fleet__list_devices", {"region": "eu-west-1"})
        host.model_says(turn, [listing])
        self.progress(f"turn one: {listing['name']} through bir-proxy…")
        rows_content, _ = await host.run_tool(turn, listing)
        rows = json.loads(text_of(rows_content))
        calls.append({"tool": listing["name"], "input": listing["input"], "rows": len(rows)})
        self.say(f"   the model calls {listing['name']} {_j(listing['input'])} -> {len(rows)} devices")
        riskiest = max(rows, key=lambda row: row["risk"])
        detail = host.tool_use("mcp__fleet__get_device", {"id": riskiest["id"]})
        host.model_says(turn, [detail])
        self.progress(f"turn one: {detail['name']} through bir-proxy…")
        device, _ = await host.run_tool(turn, detail)
        calls.append({"tool": detail["name"], "input": detail["input"]})
        self.say(f"   the model calls {detail['name']} {_j(detail['input'])} -> {_device(device)}")
        text = f"The riskiest device in eu-west-1 is {_device(device)}."
        host.model_says(turn, [{"type": "text", "text": text}])
        await host.hook("Stop", turn, last_assistant_message=text, stop_hook_active=False)
        await host.hook("SessionEnd", turn, reason="other")
        took = time.monotonic() - began
        run = await _until(
            "turn one's recording reaching the store", lambda: _finished_run(store, FIRST), self.progress
        )
        finish = run.finish or {}
        self.stages["turnOne"] = {
            "prompt": FIRST,
            "runId": run.id,
            "calls": calls,
            "modelRequests": turn.requests,
            "tokens": turn.tokens,
            "costUsd": finish.get("costUsd"),
            "seconds": round(took, 3),
        }
        self.say(
            f"   the model answers. Recorded: {len(calls)} steps, and the turn's {turn.requests} model requests,"
            f" {turn.tokens:,} tokens,\n   ${finish.get('costUsd', 0):.4f} on {MODEL} ({run.id})"
        )
        return str(run.id)

    async def _calculated(self, store: Store, run_id: str) -> str:
        row = await _until("turn one's scenario being calculated", lambda: store.scenario_of_run(run_id), self.progress)
        body = row.body
        stage: dict[str, Any] = {"scenarioId": row.id, "state": row.state, "intent": body.get("intent")}
        self.stages["calculated"] = stage
        if row.state != "ready":
            stage["reason"] = row.reason
            raise DemoFailed(f"turn one's scenario {row.id} is {row.state}: {_j(row.reason, 400)}")
        self.say(
            f"\n3. Calculated {row.id}: ready. A dry replay in the V8 sandbox, over the recorded\n"
            "   outputs with the recorded prompt's values, reproduced every recorded input; no model was asked."
        )
        self.say(f"   intent: {body.get('intent')}")
        params = body.get("paramsObject") or {}
        for name, spec in params.items():
            self.say(f"   parameter {name} ({spec.get('role')}), recorded {_j(spec.get('sampleValue'))}")
        steps = []
        for number, step in enumerate(body.get("steps") or [], 1):
            picked = _picked(step.get("toolOutputLogic"))
            steps.append({"toolName": step.get("toolName"), "toolInputLogic": step.get("toolInputLogic")})
            self.say(f"   step {number} {step.get('toolName')}: {cut(str(step.get('toolInputLogic')), 100)}")
            if picked:
                self.say(f"          its output gives {picked}")
        stage.update(parameters=params, steps=steps)
        return str(row.id)

    async def _turn_two(self, host: DemoHost, store: Store, scenario_id: str) -> str:
        self.say(f'\n4. Turn two: "{SECOND}"')
        turn = host.begin(str(uuid.uuid4()), SECOND)
        began = time.monotonic()
        self.progress("turn two: matching the prompt and deriving its values…")
        await host.hook("SessionStart", turn, source="startup")
        answer = await host.hook("UserPromptSubmit", turn, prompt=SECOND)
        context = str((answer.get("hookSpecificOutput") or {}).get("additionalContext") or "")
        ticket = store.latest_ticket(scenario_id, SECOND)
        if ticket is None or "mcp__bir__run_scenario" not in context:
            raise DemoFailed(f"turn two was not armed as a direct plan: {_j(answer, 400)}")
        self.say(
            f"   matched {scenario_id} by the {ticket.rule} rule, {_j(ticket.params)} (derived here, at no\n"
            "   cost); bir asks the model to call mcp__bir__run_scenario once"
        )
        turn.conversation.append({"role": "user", "content": context})
        before = len(host.fleet_calls())
        run_call = host.tool_use("mcp__bir__run_scenario", {})
        host.model_says(turn, [run_call])
        self.progress("turn two: bir runs the plan through bir-proxy…")
        content, failed = await host.run_tool(turn, run_call)
        ran = host.fleet_calls()[before:]
        if failed:
            raise DemoFailed(f"run_scenario answered an error: {cut(text_of(content), 400)}")
        outputs = _step_outputs(text_of(content))
        self.say("   bir runs the plan through bir-proxy. What reached the fleet server, and what came back:")
        for call, output in zip(ran, outputs + [""] * len(ran), strict=False):
            self.say(f"     {call['tool']} {_j(call['arguments'])} -> {_shown(output)}")
        text = f"The riskiest device in us-east-1 is {_shown(outputs[-1] if outputs else '')}."
        host.model_says(turn, [{"type": "text", "text": text}])
        await host.hook("Stop", turn, last_assistant_message=text, stop_hook_active=False)
        await host.hook("SessionEnd", turn, reason="other")
        self.stages["turnTwo"] = {
            "prompt": SECOND,
            "scenarioId": scenario_id,
            "rule": ticket.rule,
            "params": ticket.params,
            "ran": ran,
            "result": cut(text_of(content), 2000),
            "modelRequests": turn.requests,
            "tokens": turn.tokens,
            "seconds": round(time.monotonic() - began, 3),
        }
        self.say(f"   the model answers from the results: {turn.requests} model requests, {turn.tokens:,} tokens")
        return str(ticket.ticket)

    async def _booked(self, store: Store, scenario_id: str, ticket: str) -> None:
        from bir.hooks.local.runtime import stats_of

        rows = await _until(
            "turn two's execution report being booked",
            lambda: [e for e in store.executions(scenario_id) if e.get("ticket") == ticket],
            self.progress,
        )
        outcome = rows[0]["outcome"]
        [line] = [s for s in stats_of(store, str(self.project))["scenarios"] if s["scenarioId"] == scenario_id]
        self.stages["booked"] = {"ticket": ticket, "outcome": outcome, "stats": line}
        if outcome != "steered_full":
            raise DemoFailed(f"turn two was booked {outcome}, not steered_full")
        one, two = self.stages["turnOne"], self.stages["turnTwo"]
        tokens = "not known" if line["savedTokens"] is None else f"{line['savedTokens']:,} tokens"
        self.say(
            f"\n5. Booked {outcome}, once, on its ticket. Saved against turn one's own cost (bir stats):\n"
            f"   {tokens} and ${line['savedUsd']:.4f}. Turn one took {one['seconds']:.1f} s here, turn two"
            f" {two['seconds']:.1f} s."
        )
        self.say(
            "   (The model is a script: a request counts its conversation at four bytes a token, plus\n"
            f"   {CONTEXT_TOKENS:,} cached tokens of Claude Code's own context. No model time is in the seconds;\n"
            "   in a session the model's time is most of what a replay saves.)"
        )


def _finished_run(store: Store, prompt: str) -> RunRow | None:
    for run in store.runs(None, limit=10):
        if run.input == prompt and run.finish is not None:
            return run
    return None


def _picked(body: object) -> str | None:
    """What a step's output logic extracts, for a person: its pick rule and field, when it has one."""
    if not isinstance(body, str):
        return None
    found = re.search(r'return \{"(\w+)": .*"(max|min)", "(\w+)"', body)
    if found is None:
        return None
    name, rule, field = found.groups()
    return f"{name}: {_PICKS[rule].format(repr(field))}"


def _why(exc: BaseException) -> str:
    """The first leaf of ``exc`` (a task group's), in words."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, DemoFailed | HostError):
        return str(exc)
    return cut(f"{type(exc).__name__}: {exc}", 500)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir demo``."""

    progress = for_command(args)

    def say(text: str) -> None:
        if not args.json:
            # The account starts on a clean line: the progress line (on stderr) is erased first.
            progress.clear()
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    root = Path(tempfile.mkdtemp(prefix="bir-demo-")).resolve()
    say(f"bir demo: the whole loop on this machine, offline, with no account (BIR_HOME={root / 'home'})\n")
    demo = Demo(root, say, progress)
    failed: str | None = None
    try:
        with _isolated(demo.home):
            logs_dir(demo.home).mkdir(parents=True, exist_ok=True)
            with logging_to(logs_dir(demo.home) / f"{project_key(demo.project.resolve())}.log"):
                try:
                    anyio.run(demo.run)
                except Exception as exc:  # noqa: BLE001 - a command says what stopped it; its logs have the rest
                    failed = _why(exc)
                finally:
                    progress.clear()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    data: dict[str, Any] = {"ok": failed is None, "error": failed, "stages": demo.stages}
    if args.keep:
        data["kept"] = str(root)
    code = EXIT_FAILED if failed else EXIT_OK
    if args.json:
        return print_result(CommandResult(text="", data=data, exit_code=code), True, sys.stdout)
    if failed is not None:
        kept = f"\nKept {root}: its logs are under {logs_dir(demo.home)}." if args.keep else ""
        sys.stderr.write(f"bir demo: the loop stopped: {failed}{kept}\n")
    elif args.keep:
        say(
            f"\nKept {root}. To look inside: BIR_HOME={demo.home} bir stats (or bir scenario list,"
            f" bir logs --project {demo.project})"
        )
    return code
