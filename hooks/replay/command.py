"""``bir replay``: run a scenario's plan without a session (spec §12.1).

The plan is the one the control server runs (``bir.core.plan``), its logic runs in the evaluator
pool, and its steps go through a control server's work queue to the proxies that own their
servers. With a control server running for this directory, that one is used; otherwise ``--wrap
NAME=COMMAND`` starts one in-process (announced only in a temporary ``BIR_HOME``, so no session
sees it) and a ``bir-proxy`` per named server, with this process as their MCP host.

``run_replay`` answers a ``ReplayReport`` (``bir.hooks.replay.report``); the CLI prints it, as text or
as one JSON document. The operator named the scenario, so it keeps its own contract: ``--param`` values win over
derivation, a target left without a value ends the run with the missing-target note and a
non-zero exit (never a guess), a step it cannot send stands on its recorded output where one
exists, and the allowlist does not gate it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio

from bir.core import config
from bir.core.bundle import MAX_REPLAY_REASON
from bir.core.coverage import ReplayMode, mode_for
from bir.core.derive import derive_parameters, resolve_api_key
from bir.core.directive import reads_resp_params
from bir.core.exits import EXIT_FAILED, EXIT_MISSING_TARGET, EXIT_OK
from bir.core.handover import Stop, handover_note
from bir.core.log import log_event
from bir.core.logic import eval_tool_input_logic
from bir.core.outcome import StepVerdict
from bir.core.plan import PlanError, ScenarioReplayPlan
from bir.core.redact import redact_text
from bir.core.service import ServiceClient, ServiceError
from bir.core.step_result import StepRan, StepResult
from bir.core.types import PayloadError, Scenario, ScenarioStep, parse_scenario
from bir.evaluator import EvaluatorPool, LogicError
from bir.hooks import api
from bir.hooks.control_client import At, ControlClient, ControlError
from bir.hooks.discovery import read_discovery, write_discovery
from bir.hooks.replay.direct import DirectExecutor
from bir.hooks.replay.host import HostSessionError, ProxyHost, proxy_environment
from bir.hooks.replay.report import ReplayEnd, ReplayReport, StepOutcome
from bir.hooks.server.control import ControlServer

__all__ = [
    "ReplayArgs",
    "ReplayReport",
    "ReplayUsageError",
    "load_scenario",
    "main_args",
    "parse_param",
    "parse_wrap",
    "run_replay",
]

SERVE_WAIT_S: Final = 30.0
HEALTH_TIMEOUT_S: Final = 5.0


class ReplayUsageError(ValueError):
    """The command line or the scenario cannot be used; the message says why."""


@dataclass(frozen=True)
class ReplayArgs:
    scenario: str
    prompt: str
    params: Mapping[str, object]
    wraps: Mapping[str, str]
    dry: bool
    project: Path


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


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


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


async def _wait_served(server: ControlServer, names: Sequence[str]) -> None:
    try:
        with anyio.fail_after(SERVE_WAIT_S):
            for name in names:
                await server.queue.wait_served(name)
    except TimeoutError:
        missing = [n for n in names if not server.queue.is_served(n)]
        raise HostSessionError(f"no proxy polled for {', '.join(missing)} within {SERVE_WAIT_S:g} s") from None


async def run_replay(args: ReplayArgs, *, progress: Progress = _quiet, child_log: Path | None = None) -> ReplayReport:
    """Run ``bir replay`` and answer what happened; printing is the caller's.

    ``progress`` hears short notes for a person (a server being started, an option ignored).
    ``child_log`` is the file the ``bir-proxy`` processes it starts write their stderr to (None: ours).

    Raises:
        ReplayUsageError: the scenario cannot be read or has no steps.
        HostSessionError: a ``--wrap`` server could not be started or never polled.
        config.ConfigError: a ``BIR_*`` value cannot be used.
    """
    async with ServiceClient() as service:
        scenario = await load_scenario(args.scenario, service)
        if not scenario.steps:
            raise ReplayUsageError("the scenario has no steps")
        params = await _derive(args, scenario, service)
        run = _Run(args, scenario, params, progress, child_log)
        missing = _missing_targets(scenario, params)
        if missing:
            return _missing_report(run, missing)
        # A command ends long before a worker reaches its budget: no warm spare to pay for at start.
        async with EvaluatorPool(warm_spares=False) as pool:
            return await (_dry(run, pool) if args.dry else _with_control(run, pool))


@dataclass(frozen=True)
class _Run:
    args: ReplayArgs
    scenario: Scenario
    params: dict[str, object]
    progress: Progress
    child_log: Path | None

    def report(self, mode: ReplayMode, **fields: Any) -> ReplayReport:
        return ReplayReport(
            scenario_id=self.scenario.id,
            intent=self.scenario.intent,
            prompt=self.args.prompt,
            mode=mode,
            step_count=len(self.scenario.steps),
            **fields,
        )


def _missing_report(run: _Run, missing: list[str]) -> ReplayReport:
    # The stop belongs to no step: the note lists every step as not run.
    stop = Stop("params_failed", None, f"no value for the target {', '.join(missing)}: pass --param NAME=VALUE")
    note = handover_note(run.scenario.steps, stop, params=run.params, redact=redact_text)
    return run.report(
        mode_for(run.scenario.steps, set(run.args.wraps)),
        params=run.params,
        steps=(),
        outcome="missing_target",
        exit_code=EXIT_MISSING_TARGET,
        missing=tuple(missing),
        stop=stop,
        note=note,
        partial=True,
    )


def _stopped_report(run: _Run, mode: ReplayMode, exc: PlanError, steps: tuple[StepOutcome, ...] = ()) -> ReplayReport:
    return run.report(
        mode,
        params=run.params,
        steps=steps,
        outcome="stopped",
        exit_code=EXIT_FAILED,
        stop=exc.stop,
        stop_tool=exc.tool_name,
        note=exc.note,
        partial=True,
    )


async def _dry(run: _Run, pool: EvaluatorPool) -> ReplayReport:
    """Derive and plan only: paramsLogic, then each input that does not read an earlier step's output."""
    scenario = run.scenario
    mode = mode_for(scenario.steps, set(run.args.wraps))
    plan = ScenarioReplayPlan(scenario, mode, _ready(run.params), pool)
    try:
        await plan.ready()
    except PlanError as exc:
        return _stopped_report(run, mode, exc)
    steps: list[StepOutcome] = []
    for position, step in enumerate(scenario.steps):
        tool_input: dict[str, Any] | None = None
        error: str | None = None
        if not reads_resp_params(step):
            try:
                tool_input = await eval_tool_input_logic(pool, step, plan.params or {}, {})
            except LogicError as exc:
                error = f"toolInputLogic failed: {exc.message}"
        steps.append(_outcome(position, step, tool_input=tool_input, error=error))
    return run.report(mode, params=plan.params, steps=tuple(steps), outcome="dry", exit_code=EXIT_OK)


def _outcome(
    position: int,
    step: ScenarioStep,
    *,
    tool_input: dict[str, Any] | None = None,
    output: str | None = None,
    verdict: StepVerdict | None = None,
    error: str | None = None,
) -> StepOutcome:
    return StepOutcome(
        position=position,
        step_index=step.step_index,
        tool_name=step.tool_name,
        reasoning=step.reasoning,
        tool_input=tool_input,
        output=output,
        status=verdict.status if verdict else None,
        stage=verdict.stage if verdict else None,
        error=verdict.error if verdict else error,
        duration_ms=verdict.duration_ms if verdict else None,
    )


async def _ready(params: dict[str, object]) -> dict[str, object]:
    return params


async def _served(url: str, token: str) -> set[str]:
    """The servers a running control server has a polling proxy for (its ``/health``); empty if it cannot say."""
    try:
        async with ControlClient(At(url, token)) as control:
            health = await control.call(api.HEALTH, timeout_s=HEALTH_TIMEOUT_S)
    except ControlError:
        return set()
    return set(health.served)


async def _with_control(run: _Run, pool: EvaluatorPool) -> ReplayReport:
    args = run.args
    existing = read_discovery(args.project)
    if existing is not None:
        if args.wraps:
            run.progress("a control server is running for this directory: --wrap is not needed and is ignored")
        served = await _served(existing.url, existing.token)
        return await _execute(run, pool, existing.url, existing.token, served)
    if not args.wraps:
        run.progress("no control server runs for this directory and no --wrap was given: MCP steps cannot be sent")
    server = ControlServer(replay_enabled=True)
    home = Path(tempfile.mkdtemp(prefix="bir-replay-"))
    hosts = [
        ProxyHost(name, command, project=args.project, env=proxy_environment(home), log_path=run.child_log)
        for name, command in args.wraps.items()
    ]
    try:
        url = await server.start()
        write_discovery(server.discovery(args.project), home=home)
        for host in hosts:
            run.progress(f"starting {host.name}: {host.command}")
            await host.start()
        await _wait_served(server, [h.name for h in hosts])
        return await _execute(run, pool, url, server.token, {h.name for h in hosts})
    finally:
        # Shielded: a cancelled run still stops what it started (each stop is bounded on its own).
        with anyio.CancelScope(shield=True):
            for host in hosts:
                await host.stop()
            await server.stop()
        shutil.rmtree(home, ignore_errors=True)


async def _execute(run: _Run, pool: EvaluatorPool, url: str, token: str, wrapped: set[str]) -> ReplayReport:
    scenario = run.scenario
    inputs: dict[int, dict[str, Any]] = {}
    outputs: dict[int, str] = {}
    mode = mode_for(scenario.steps, wrapped)
    # The operator named the scenario: a step it cannot send stands on its recorded output, where it has one.
    plan = ScenarioReplayPlan(scenario, mode, _ready(run.params), pool, recorded_fallback=True)
    async with ControlClient(At(url, token)) as control:
        direct = DirectExecutor(control, step_timeout_s=config.require_int("BIR_STEP_TIMEOUT_MS") / 1000, allow=None)

        async def execute(step: ScenarioStep, tool_input: dict[str, Any]) -> StepResult:
            position = scenario.steps.index(step)
            inputs[position] = tool_input
            result = await direct(step, tool_input)
            if isinstance(result, StepRan):
                outputs[position] = result.output
            return result

        bundle = await plan.compose_bundle(MAX_REPLAY_REASON, execute)
        response: dict[str, Any] | None = None
        response_error: str | None = None
        if bundle.stop is None:
            try:
                response = await plan.response_model()
            except PlanError as exc:
                response_error = exc.message
    verdicts = {v.step_index: v for v in plan.ledger}
    steps: list[StepOutcome] = []
    for position, step in enumerate(scenario.steps):
        verdict = verdicts.get(step.step_index)
        if position not in inputs and (verdict is None or verdict.stage == "params"):
            continue  # a step the run never reached is absent, not skipped (§11.2a)
        steps.append(
            _outcome(position, step, tool_input=inputs.get(position), output=outputs.get(position), verdict=verdict)
        )
    stop = bundle.stop
    outcome: ReplayEnd = "done" if response is not None else "response_failed" if stop is None else "stopped"
    code = EXIT_OK if outcome == "done" else EXIT_FAILED
    stop_tool = scenario.steps[stop.step].tool_name if stop is not None and stop.step is not None else None
    log_event("replay.finished", scenario_id=scenario.id, exit_code=code, steps=len(steps), mode=mode)
    return run.report(
        mode,
        params=plan.params if plan.params is not None else run.params,
        steps=tuple(steps),
        outcome=outcome,
        exit_code=code,
        stop=stop,
        stop_tool=stop_tool,
        note=bundle.note,
        partial=bundle.partial,
        response=response,
        response_error=response_error,
    )


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
        project=Path(namespace.project).resolve(),
    )
