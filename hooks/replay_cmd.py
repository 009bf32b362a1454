"""``bir replay``: run a scenario's plan without a session (spec §12.1).

The plan is the one the control server runs (``bir.core.plan``), its logic runs in the evaluator
pool, and its steps go through a control server's work queue to the proxies that own their
servers. With a control server running for this directory, that one is used; otherwise ``--wrap
NAME=COMMAND`` starts one in-process (announced only in a temporary ``BIR_HOME``, so no session
sees it) and a ``bir-proxy`` per named server, with this process as their MCP host.

The operator named the scenario, so it keeps its own contract: ``--param`` values win over
derivation, a target left without a value ends the run with the missing-target note and a
non-zero exit (never a guess), a step it cannot send stands on its recorded output where one
exists, and the allowlist does not gate it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import anyio
import httpx

from bir.core import config
from bir.core.bundle import MAX_REPLAY_REASON
from bir.core.coverage import mode_for
from bir.core.derive import derive_parameters, resolve_api_key
from bir.core.handover import Stop, handover_note
from bir.core.log import log_event
from bir.core.outcome import StepVerdict
from bir.core.plan import PlanError, ScenarioReplayPlan, StepResult, reads_resp_params
from bir.core.redact import redact, redact_text
from bir.core.service import ServiceClient, ServiceError
from bir.core.truncate import cut, serialize_capped
from bir.core.types import PayloadError, Scenario, ScenarioStep, parse_scenario
from bir.evaluator import EvaluatorPool, LogicError
from bir.hooks.direct import DirectExecutor
from bir.hooks.discovery import read_discovery, write_discovery
from bir.hooks.host_session import HostSessionError, ProxyHost, proxy_environment
from bir.hooks.server import ControlServer

EXIT_OK: Final = 0
EXIT_STOPPED: Final = 1
EXIT_USAGE: Final = 2
EXIT_MISSING_TARGET: Final = 3
SERVE_WAIT_S: Final = 30.0
TERMINAL_CUT: Final = 600


class ReplayUsageError(ValueError):
    """The command line or the scenario cannot be used; the message says why."""


@dataclass(frozen=True)
class ReplayArgs:
    scenario: str
    prompt: str
    params: Mapping[str, object]
    wraps: Mapping[str, str]
    dry: bool
    as_json: bool
    project: Path


@dataclass
class _StepRecord:
    position: int
    step: ScenarioStep
    tool_input: dict[str, Any] | None = None
    output: str | None = None
    started: float = field(default_factory=time.monotonic)
    duration_ms: int | None = None


def parse_param(text: str) -> tuple[str, object]:
    """``NAME=VALUE``: a value that reads as JSON (a number, true, an object…) is that value, anything else text.

    Raises:
        ReplayUsageError: there is no ``=`` or no name.
    """
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ReplayUsageError(f"--param takes NAME=VALUE, got {text[:80]!r}")
    try:
        value: object = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


def parse_wrap(text: str) -> tuple[str, str]:
    """``NAME=COMMAND``.

    Raises:
        ReplayUsageError: there is no ``=``, no name, or no command.
    """
    name, sep, command = text.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise ReplayUsageError(f"--wrap takes NAME=COMMAND, got {text[:80]!r}")
    return name.strip(), command.strip()


def _scenario_file(ref: str) -> Scenario | None:
    """The scenario in the file ``ref`` names, or None when ``ref`` is a ``scn_`` id and no such file exists.

    Raises:
        ReplayUsageError: the file is missing or unreadable, or holds no readable scenario.
    """
    path = Path(ref).expanduser()
    if not path.exists() and ref.startswith("scn_"):
        return None
    try:
        return parse_scenario(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayUsageError(f"cannot read {ref}: {exc.strerror or exc}") from None
    except PayloadError as exc:
        raise ReplayUsageError(f"{ref}: {exc}") from None


async def load_scenario(ref: str, service: ServiceClient) -> Scenario:
    """A scenario from a file, or from the service by its ``scn_`` id.

    Raises:
        ReplayUsageError: the file is missing or unreadable, or the service cannot give it.
    """
    from_file = _scenario_file(ref)
    if from_file is not None:
        return from_file
    if not service.configured:
        raise ReplayUsageError(f"{ref} names a scenario on the service, and BIR_AUTH_URL is not set")
    try:
        return await service.get_scenario(ref)
    except (ServiceError, PayloadError) as exc:
        raise ReplayUsageError(f"{ref}: {exc}") from None


class _Printer:
    """Human output on stdout, progress on stderr; with --json, stdout carries one document only."""

    def __init__(self, as_json: bool, out: IO[str], err: IO[str]) -> None:
        self.as_json = as_json
        self._out = out
        self._err = err

    def progress(self, text: str) -> None:
        self._err.write(text + "\n")
        self._err.flush()

    def line(self, text: str = "") -> None:
        if not self.as_json:
            self._out.write(text + "\n")

    def document(self, doc: Mapping[str, object]) -> None:
        if self.as_json:
            self._out.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n")


async def _derive(args: ReplayArgs, scenario: Scenario, service: ServiceClient) -> dict[str, object]:
    """Operator values first; derivation only for what they leave open, and only where it can run."""
    open_names = [name for name in scenario.params_object if name not in args.params]
    derived: dict[str, object] = {}
    if open_names:
        api_key = resolve_api_key()
        result = await derive_parameters(
            prompt=args.prompt,
            scenario=scenario,
            api_key=api_key,
            service=service if service.configured else None,
            timeout_s=config.require_int("BIR_DERIVE_BUDGET_MS") / 1000,
            redact=redact_text,
        )
        derived = dict(result.params)
        missing = [name for name in result.missing if name not in args.params]
        log_event("replay.derived", scenario_id=scenario.id, source=result.source, missing=missing)
    merged = {name: derived.get(name) for name in scenario.params_object}
    merged.update(args.params)
    return merged


def _missing_targets(scenario: Scenario, params: Mapping[str, object]) -> list[str]:
    return [name for name in scenario.targets if params.get(name) is None]


def _verdicts(plan: ScenarioReplayPlan) -> dict[int, StepVerdict]:
    return {v.step_index: v for v in plan.ledger}


async def _wait_served(server: ControlServer, names: Sequence[str]) -> None:
    try:
        with anyio.fail_after(SERVE_WAIT_S):
            for name in names:
                await server.queue.wait_served(name)
    except TimeoutError:
        missing = [n for n in names if not server.queue.is_served(n)]
        raise HostSessionError(f"no proxy polled for {', '.join(missing)} within {SERVE_WAIT_S:g} s") from None


async def run_replay(args: ReplayArgs, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr) -> int:
    """Run ``bir replay``; answer the exit code. Never raises for bad input: it says what is wrong."""
    printer = _Printer(args.as_json, out, err)
    try:
        return await _run(args, printer)
    except ReplayUsageError as exc:
        err.write(f"bir replay: {exc}\n")
        return EXIT_USAGE
    except (HostSessionError, config.ConfigError) as exc:
        err.write(f"bir replay: {exc}\n")
        return EXIT_USAGE


async def _run(args: ReplayArgs, printer: _Printer) -> int:
    async with ServiceClient() as service:
        scenario = await load_scenario(args.scenario, service)
        if not scenario.steps:
            raise ReplayUsageError("the scenario has no steps")
        params = await _derive(args, scenario, service)
        missing = _missing_targets(scenario, params)
        if missing:
            note = handover_note(
                scenario.steps,
                Stop("params_failed", 0, f"no value for the target {', '.join(missing)}: pass --param NAME=VALUE"),
                params=params,
                redact=redact_text,
            )
            printer.line(note)
            printer.document(
                {"scenario": scenario.id, "params": params, "missing": missing, "note": note, "exitCode": 3}
            )
            return EXIT_MISSING_TARGET
        async with EvaluatorPool() as pool:
            run = _Run(args, scenario, params, pool, printer)
            return await (_dry(run) if args.dry else _with_control(run))


@dataclass(frozen=True)
class _Run:
    args: ReplayArgs
    scenario: Scenario
    params: dict[str, object]
    pool: EvaluatorPool
    printer: _Printer


async def _dry(run: _Run) -> int:
    """Derive and plan only: paramsLogic, then each input that does not read an earlier step's output."""
    scenario, params, pool, printer = run.scenario, run.params, run.pool, run.printer
    plan = ScenarioReplayPlan(scenario, "direct", _ready(params), pool)
    try:
        await plan.ready()
    except PlanError as exc:
        printer.line(exc.note or exc.message)
        printer.document({"scenario": scenario.id, "params": params, "note": exc.note, "exitCode": EXIT_STOPPED})
        return EXIT_STOPPED
    from bir.core.logic import eval_tool_input_logic

    steps: list[dict[str, object]] = []
    printer.line(f"scenario {scenario.id or '(unnamed)'}: {scenario.intent}")
    printer.line(f"parameters: {json.dumps(plan.params, ensure_ascii=False)}")
    for position, step in enumerate(scenario.steps):
        entry: dict[str, object] = {"stepIndex": step.step_index, "toolName": step.tool_name}
        if reads_resp_params(step):
            entry["input"] = None
            shown = "(reads an earlier step's output)"
        else:
            try:
                tool_input = await eval_tool_input_logic(pool, step, plan.params or {}, {})
                entry["input"] = tool_input
                shown = cut(json.dumps(tool_input, ensure_ascii=False), TERMINAL_CUT)
            except LogicError as exc:
                entry["error"] = exc.message
                shown = f"(toolInputLogic failed: {exc.message})"
        steps.append(entry)
        printer.line(f"  {position + 1}. {step.tool_name} — {step.reasoning}")
        printer.line(f"     input: {shown}")
    printer.document({"scenario": scenario.id, "params": plan.params, "steps": steps, "dry": True, "exitCode": 0})
    return EXIT_OK


async def _ready(params: dict[str, object]) -> dict[str, object]:
    return params


async def _with_control(run: _Run) -> int:
    args, printer = run.args, run.printer
    existing = read_discovery(args.project)
    if existing is not None:
        if args.wraps:
            printer.progress("a control server is running for this directory: --wrap is not needed and is ignored")
        return await _execute(run, existing.url, existing.token)
    if not args.wraps:
        printer.progress(
            "no control server is running for this directory and no --wrap was given: MCP steps cannot be sent"
        )
    server = ControlServer(replay_enabled=True)
    home = Path(tempfile.mkdtemp(prefix="bir-replay-"))
    hosts = [
        ProxyHost(name, command, project=args.project, env=proxy_environment(home))
        for name, command in args.wraps.items()
    ]
    try:
        url = await server.start()
        write_discovery(server.discovery(args.project), home=home)
        for host in hosts:
            printer.progress(f"starting {host.name}: {host.command}")
            await host.start()
        await _wait_served(server, [h.name for h in hosts])
        return await _execute(run, url, server.token)
    finally:
        # Shielded: a cancelled run still stops what it started (each stop is bounded on its own).
        with anyio.CancelScope(shield=True):
            for host in hosts:
                await host.stop()
            await server.stop()
        shutil.rmtree(home, ignore_errors=True)


async def _execute(run: _Run, url: str, token: str) -> int:
    args, scenario, params, pool, printer = run.args, run.scenario, run.params, run.pool, run.printer
    records: dict[int, _StepRecord] = {}
    count = len(scenario.steps)

    def on_step(verdict: StepVerdict) -> None:
        position = next((p for p, s in enumerate(scenario.steps) if s.step_index == verdict.step_index), -1)
        record = records.get(position)
        took = f" ({verdict.duration_ms} ms)" if verdict.duration_ms is not None else ""
        why = f": {verdict.error}" if verdict.error else ""
        printer.progress(f"[{position + 1}/{count}] {verdict.tool_name} … {verdict.status}{took}{why}")
        if record is not None and record.duration_ms is None:
            record.duration_ms = int((time.monotonic() - record.started) * 1000)

    # The operator named the scenario: a step it cannot send stands on its recorded output, where it has one.
    plan = ScenarioReplayPlan(
        scenario, mode_for(scenario.steps, set()), _ready(params), pool, recorded_fallback=True, on_step=on_step
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        direct = DirectExecutor(
            client, url, token, step_timeout_s=config.require_int("BIR_STEP_TIMEOUT_MS") / 1000, allow=None
        )

        async def execute(step: ScenarioStep, tool_input: dict[str, Any]) -> StepResult:
            position = scenario.steps.index(step)
            records[position] = _StepRecord(position, step, tool_input=tool_input)
            printer.progress(f"[{position + 1}/{count}] {step.tool_name} …")
            result = await direct(step, tool_input)
            output = getattr(result, "output", None)
            records[position].output = output if isinstance(output, str) else None
            return result

        bundle = await plan.compose_bundle(MAX_REPLAY_REASON, execute)
        response: dict[str, Any] | None = None
        response_error: str | None = None
        if bundle.stop is None:
            try:
                response = await plan.response_model()
            except PlanError as exc:
                response_error = exc.message
    verdicts = _verdicts(plan)
    steps_doc: list[dict[str, object]] = []
    for position, step in enumerate(scenario.steps):
        verdict = verdicts.get(step.step_index)
        record = records.get(position)
        if verdict is None and record is None:
            continue  # a step the run never reached is absent, not skipped (§11.2a)
        entry: dict[str, object] = {
            "stepIndex": step.step_index,
            "toolName": step.tool_name,
            "input": record.tool_input if record else None,
            "output": record.output if record else None,
            "status": verdict.status if verdict else None,
            "stage": verdict.stage if verdict else None,
            "error": verdict.error if verdict else None,
            "durationMs": verdict.duration_ms if verdict else None,
        }
        steps_doc.append(entry)
        printer.line(f"step {position + 1}/{count}  {step.tool_name}  {entry['status']}")
        printer.line(f"  input:  {cut(serialize_capped(redact(entry['input'])), TERMINAL_CUT)}")
        if record is not None and record.output is not None:
            printer.line(f"  output: {cut(redact_text(record.output), TERMINAL_CUT)}")
        if verdict is not None and verdict.error:
            printer.line(f"  error:  {verdict.error}")
    code = EXIT_OK if bundle.stop is None and response is not None else EXIT_STOPPED
    if bundle.note:
        printer.line()
        printer.line(bundle.note)
    if response is not None:
        printer.line()
        printer.line("response model:")
        printer.line(json.dumps(response, ensure_ascii=False, indent=2))
    elif response_error:
        printer.line(f"responseParamsLogic failed: {response_error}")
    printer.document(
        {
            "scenario": scenario.id,
            "prompt": args.prompt,
            "params": plan.params,
            "steps": steps_doc,
            "responseModel": response,
            "note": bundle.note,
            "partial": bundle.partial,
            "exitCode": code,
        }
    )
    log_event("replay.finished", scenario_id=scenario.id, exit_code=code, steps=len(steps_doc))
    return code


def main_args(namespace: Any) -> ReplayArgs:
    """Turn argparse's namespace into ``ReplayArgs``.

    Raises:
        ReplayUsageError: a --param or --wrap is malformed.
    """
    params = dict(parse_param(p) for p in namespace.param or [])
    wraps = dict(parse_wrap(w) for w in namespace.wrap or [])
    return ReplayArgs(
        scenario=namespace.scenario,
        prompt=namespace.prompt,
        params=params,
        wraps=wraps,
        dry=bool(namespace.dry),
        as_json=bool(namespace.json),
        project=Path(namespace.project).resolve(),
    )
