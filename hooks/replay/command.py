"""``bir replay``: run a scenario's plan without a session (spec §12.1).

The plan is the one the control server runs (``bir.core.plan``), its logic runs in the evaluator
pool, and its steps go through a control server's work queue to the proxies that own their
servers. ``--wrap NAME=COMMAND`` is always honoured: it starts a control server in-process (announced
only in a temporary ``BIR_HOME``, so no session sees it) and a ``bir-proxy`` per named server, with this
process as their MCP host. Without ``--wrap``, the control server running for this directory is used.

Before any step runs, every body of the scenario is compiled in the pool, and the steps are checked
against what can run here: a built-in step, or one whose server no proxy serves, stops the run unless
it stands on a recorded output. Such a run is refused before anything happens, unless ``--partial``
asks for the steps before it; ``--dry`` says where it would stop.

``run_replay`` answers a ``ReplayReport`` (``bir.hooks.replay.report``); the CLI prints it, as text or
as one JSON document. The operator named the scenario, so it keeps its own contract: ``--param`` values
win over derivation (a name the scenario does not have is refused), a target left without a value ends
the run with the missing-target note and a non-zero exit (never a guess), a step it cannot send stands
on its recorded output where one exists, and the allowlist does not gate it. An interrupt (the task
cancelled, as Ctrl-C does under ``asyncio.run``) ends it with a report of what ran and what did not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio

from bir.core import config
from bir.core.bundle import MAX_REPLAY_REASON
from bir.core.coverage import ReplayMode, scenario_mode
from bir.core.derive import derive_parameters, resolve_api_key
from bir.core.directive import reads_resp_params
from bir.core.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MISSING_TARGET, EXIT_OK
from bir.core.handover import Stop, handover_note
from bir.core.log import log_event
from bir.core.logic import CompileFailure, compile_check, eval_tool_input_logic
from bir.core.outcome import StepVerdict
from bir.core.plan import PlanError, ScenarioReplayPlan
from bir.core.redact import redact_text
from bir.core.service import ServiceClient, ServiceError
from bir.core.step_result import StepNotSent, StepRan, StepResult
from bir.core.types import PayloadError, Scenario, ScenarioStep, parse_qualified_name, parse_scenario
from bir.evaluator import EvaluatorPool, LogicError
from bir.hooks import api
from bir.hooks.control_client import At, ControlClient, ControlError
from bir.hooks.discovery import read_discovery, write_discovery
from bir.hooks.replay import catalog
from bir.hooks.replay.direct import DirectExecutor
from bir.hooks.replay.host import HostSessionError, ProxyHost, proxy_environment
from bir.hooks.replay.report import Blocked, ReplayEnd, ReplayReport, StepOutcome, blocked_sentence
from bir.hooks.server.control import ControlServer

__all__ = [
    "ReplayArgs",
    "ReplayReport",
    "ReplayUsageError",
    "blocked_step",
    "load_scenario",
    "main_args",
    "parse_param",
    "parse_wrap",
    "run_replay",
]

SERVE_WAIT_S: Final = 30.0
HEALTH_TIMEOUT_S: Final = 5.0


class ReplayUsageError(ValueError):
    """The command line or the scenario cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class ReplayArgs:
    scenario: str
    prompt: str
    params: Mapping[str, object]
    wraps: Mapping[str, str]
    dry: bool
    project: Path
    partial: bool = False


def parse_param(text: str) -> tuple[str, object]:
    """``NAME=VALUE``: a value that reads as JSON (a number, true, an object…) is that value, anything else text.

    Raises:
        ReplayUsageError: there is no ``=`` or no name.
    """
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ReplayUsageError(f"--param takes NAME=VALUE (--param region=eu-west-1), got {text[:80]!r}")
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
        raise ReplayUsageError(
            f"--wrap takes NAME=COMMAND (--wrap fleet='python -m bir.examples.fleet_server'), got {text[:80]!r}"
        )
    return name.strip(), command.strip()


def parse_scenario_text(ref: str, text: str) -> Scenario:
    """The scenario in ``text`` (read from ``ref``), or a sentence saying why it is not one.

    Raises:
        ReplayUsageError: not JSON, not a JSON object, or not a usable scenario.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReplayUsageError(f"{ref} is not a scenario: it is not JSON ({exc})") from None
    except RecursionError:
        raise ReplayUsageError(f"{ref} is not a scenario: it is nested too deeply to read") from None
    if not isinstance(data, dict):
        kind = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(data), "null")
        raise ReplayUsageError(f"{ref} is not a scenario: it holds a JSON {kind}, and a scenario is a JSON object")
    try:
        return parse_scenario(data)
    except PayloadError as exc:
        why = str(exc).removeprefix("scenario: ")
        raise ReplayUsageError(f"{ref} is not a usable scenario: {why}") from None


def _scenario_file(ref: str) -> Scenario | None:
    """The scenario of the file ``ref`` names, else of the packaged example of that name; None for a
    ``scn_`` id that names neither (it is the service's).

    Raises:
        ReplayUsageError: no such file or example, or it is unreadable, or holds no usable scenario.
    """
    path = Path(ref).expanduser()
    if not path.exists():
        example = catalog.find(ref)
        if example is not None:
            return example.scenario
        if ref.startswith("scn_"):
            return None
        names = ", ".join(catalog.names()) or "none installed"
        raise ReplayUsageError(
            f"{ref} is neither a scenario file, a packaged scenario ({names}: `bir replay --list`) nor a scn_ id"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayUsageError(f"cannot read {ref}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_scenario_text(ref, text)


async def load_scenario(ref: str, service: ServiceClient) -> Scenario:
    """A scenario from a file, a packaged example by name, or the service by its ``scn_`` id.

    Raises:
        ReplayUsageError: the file is missing or unreadable, or the service cannot give it.
    """
    from_file = _scenario_file(ref)
    if from_file is not None:
        return from_file
    if not service.configured:
        raise ReplayUsageError(
            f"{ref} names a scenario on the BaseIn service, and no service is signed in: run `bir login`, "
            "or give a scenario file or a packaged name (`bir replay --list`)"
        )
    try:
        return await service.get_scenario(ref)
    except (ServiceError, PayloadError) as exc:
        raise ReplayUsageError(
            f"{ref}: {exc}; `bir scenario list` shows the scenarios the service has for you"
        ) from None


def refuse_unknown_params(params: Mapping[str, object], scenario: Scenario) -> None:
    """A ``--param`` the scenario does not have is a typo, never a value quietly dropped.

    Raises:
        ReplayUsageError: a name is not one of the scenario's parameters.
    """
    unknown = [name for name in params if name not in scenario.params_object]
    if not unknown:
        return
    have = ", ".join(scenario.params_object) or "none"
    names = ", ".join(repr(name) for name in unknown)
    raise ReplayUsageError(f"the scenario has no parameter {names}; its parameters: {have}")


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


async def _derive(
    args: ReplayArgs, scenario: Scenario, service: ServiceClient, settings: config.Settings
) -> dict[str, object]:
    """Operator values first; derivation only for what they leave open, and only where it can run."""
    open_names = [name for name in scenario.params_object if name not in args.params]
    derived: dict[str, object] = {}
    if open_names:
        api_key = resolve_api_key(settings)
        result = await derive_parameters(
            prompt=args.prompt,
            scenario=scenario,
            api_key=api_key,
            service=service if service.configured else None,
            timeout_s=settings.derive_budget_ms / 1000,
            model=settings.derive_model,
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


def blocked_step(scenario: Scenario, reachable: AbstractSet[str], *, through_session: bool = False) -> Blocked | None:
    """The first step that cannot run here and has no recorded output to stand on, or None.

    ``reachable``: the servers a proxy serves for this run. ``through_session``: they are the proxies of
    the control server running for this directory (not ``--wrap``), which says how to get another.
    """
    for position, step in enumerate(scenario.steps):
        if step.recorded_output is not None:
            continue
        parsed = parse_qualified_name(step.tool_name)
        if parsed is None:
            return Blocked(
                position,
                step.tool_name,
                f"{step.tool_name} is a built-in tool, and it runs only inside a Claude Code session",
                "Add --partial to run the steps before it and stop there, or ask for it in a Claude Code "
                "session of a project where bir is installed (bir install --replay).",
            )
        server = parsed[0]
        if server not in reachable:
            where = (
                f"no proxy of the control server running here serves {server}"
                if through_session
                else f"no proxy serves {server} for this run"
            )
            return Blocked(
                position,
                step.tool_name,
                where,
                f"Give --wrap {server}=COMMAND (the command that starts that MCP server), or add --partial to "
                "run the steps before it.",
            )
    return None


async def _wait_served(server: ControlServer, hosts: Sequence[ProxyHost]) -> None:
    try:
        with anyio.fail_after(SERVE_WAIT_S):
            for host in hosts:
                await server.queue.wait_served(host.name)
    except TimeoutError:
        missing = [h.name for h in hosts if not server.queue.is_served(h.name)]
        raise HostSessionError(
            f"the proxy for {', '.join(missing)} started but never asked the control server for work within "
            f"{SERVE_WAIT_S:g} s; run again with --verbose to see its messages"
        ) from None


@dataclass
class _Live:
    """What a run has done so far, kept where an interrupt can still read it."""

    plan: ScenarioReplayPlan | None = None
    inputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Run:
    args: ReplayArgs
    scenario: Scenario
    params: dict[str, object]
    progress: Progress
    child_log: Path | None
    settings: config.Settings
    live: _Live = field(default_factory=_Live)

    @property
    def mode(self) -> ReplayMode:
        return scenario_mode(self.scenario.steps)

    def report(self, **fields: Any) -> ReplayReport:
        return ReplayReport(
            scenario_id=self.scenario.id,
            intent=self.scenario.intent,
            prompt=self.args.prompt,
            mode=self.mode,
            step_count=len(self.scenario.steps),
            **fields,
        )


async def run_replay(
    args: ReplayArgs,
    *,
    progress: Progress = _quiet,
    child_log: Path | None = None,
    settings: config.Settings | None = None,
) -> ReplayReport:
    """Run ``bir replay`` and answer what happened; printing is the caller's.

    ``progress`` hears what the run is doing as it does it (a server starting, each step), for a
    terminal's progress line. ``child_log`` is the file the ``bir-proxy`` processes it starts write their
    stderr to (None: ours). A cancellation of the task running it (Ctrl-C, under ``asyncio.run``) ends the
    run: what it started is stopped, and the report says what ran and what did not (exit 130).
    ``settings`` are the ``BIR_*`` variables it runs by (read now when None).

    Raises:
        ReplayUsageError: the scenario cannot be read, has no steps, or does not have a ``--param`` name.
        HostSessionError: a ``--wrap`` server could not be started or never polled.
        config.ConfigError: ``settings`` is None and a ``BIR_*`` value cannot be used.
    """
    started: list[_Run] = []
    settings = settings if settings is not None else config.load()
    try:
        return await _replay(args, progress, child_log, started, settings)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.uncancel() > 0:
            raise  # cancelled by more than the interrupt: not ours to end
        log_event("replay.interrupted", scenario=args.scenario)
        if not started:
            raise
        return _report_of(started[0], "interrupted", EXIT_INTERRUPTED)


async def _replay(
    args: ReplayArgs, progress: Progress, child_log: Path | None, started: list[_Run], settings: config.Settings
) -> ReplayReport:
    async with ServiceClient(settings=settings) as service:
        progress("reading the scenario…")
        scenario = await load_scenario(args.scenario, service)
        if not scenario.steps:
            raise ReplayUsageError("the scenario has no steps: there is nothing to replay")
        refuse_unknown_params(args.params, scenario)
        run = _Run(args, scenario, {}, progress, child_log, settings)
        started.append(run)
        if any(name not in args.params for name in scenario.params_object):
            progress("deriving the parameters…")
        params = await _derive(args, scenario, service, settings)
        run = _Run(args, scenario, params, progress, child_log, settings, run.live)
        started[0] = run
        missing = _missing_targets(scenario, run.params)
        if missing:
            return _missing_report(run, missing)
        progress("starting the evaluator…")
        # A command ends long before a worker reaches its budget: no warm spare to pay for at start.
        async with EvaluatorPool(warm_spares=False, settings=settings) as pool:
            progress("compiling the scenario's logic…")
            failures = await compile_check(pool, scenario)
            if failures:
                return _uncompiled_report(run, failures)
            return await (_dry(run, pool) if args.dry else _with_control(run, pool))


def _missing_report(run: _Run, missing: list[str]) -> ReplayReport:
    # The stop belongs to no step: the note lists every step as not run.
    stop = Stop("params_failed", None, f"no value for the target {', '.join(missing)}: pass --param NAME=VALUE")
    note = handover_note(run.scenario.steps, stop, params=run.params, redact=redact_text)
    return run.report(
        params=run.params,
        steps=(),
        outcome="missing_target",
        exit_code=EXIT_MISSING_TARGET,
        missing=tuple(missing),
        stop=stop,
        note=note,
        partial=True,
    )


def _uncompiled_report(run: _Run, failures: Sequence[CompileFailure]) -> ReplayReport:
    shown = "; ".join(f"{f.label}: {f.message}" for f in failures[:5])
    more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
    log_event("replay.refused", scenario_id=run.scenario.id, why="does_not_compile", bodies=[f.label for f in failures])
    return run.report(
        params=run.params,
        steps=(),
        outcome="refused",
        exit_code=EXIT_FAILED,
        refusal=f"{len(failures)} of the scenario's bodies {'does' if len(failures) == 1 else 'do'} not compile: "
        f"{shown}{more}. Fix {'it' if len(failures) == 1 else 'them'}, then run it again (a scenario on the "
        "service: bir scenario check).",
        refusal_code="does_not_compile",
    )


def _cannot_finish_report(run: _Run, blocked: Blocked) -> ReplayReport:
    log_event("replay.refused", scenario_id=run.scenario.id, why="cannot_finish_here", step=blocked.position)
    return run.report(
        params=run.params,
        steps=(),
        outcome="refused",
        exit_code=EXIT_FAILED,
        blocked=blocked,
        refusal=f"The plan cannot finish here: {blocked_sentence(blocked, len(run.scenario.steps))}",
        refusal_code="cannot_finish_here",
    )


def _stopped_report(run: _Run, exc: PlanError, blocked: Blocked | None = None) -> ReplayReport:
    return run.report(
        params=run.params,
        steps=(),
        outcome="stopped",
        exit_code=EXIT_FAILED,
        stop=exc.stop,
        stop_tool=exc.tool_name,
        note=exc.note,
        partial=True,
        blocked=blocked,
    )


async def _dry(run: _Run, pool: EvaluatorPool) -> ReplayReport:
    """Derive and plan only: paramsLogic, then each input that does not read an earlier step's output;
    and where a real run would stop."""
    scenario = run.scenario
    reachable, through_session = await _reachable(run.args)
    blocked = blocked_step(scenario, reachable, through_session=through_session)
    plan = ScenarioReplayPlan(scenario, run.mode, _ready(run.params), pool)
    try:
        await plan.ready()
    except PlanError as exc:
        return _stopped_report(run, exc, blocked)
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
    return run.report(params=plan.params, steps=tuple(steps), outcome="dry", exit_code=EXIT_OK, blocked=blocked)


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


async def _reachable(args: ReplayArgs) -> tuple[set[str], bool]:
    """The servers a proxy will serve for this run, and whether they are the running control server's."""
    if args.wraps:
        return set(args.wraps), False
    existing = read_discovery(args.project)
    if existing is None:
        return set(), False
    return await _served(existing.url, existing.token), True


async def _with_control(run: _Run, pool: EvaluatorPool) -> ReplayReport:
    args = run.args
    reachable, through_session = await _reachable(args)
    blocked = blocked_step(run.scenario, reachable, through_session=through_session)
    if blocked is not None and not args.partial:
        return _cannot_finish_report(run, blocked)
    if not args.wraps:
        existing = read_discovery(args.project)
        if existing is None:
            # Every step stands on a recorded output, or --partial stops before the first: nothing to send.
            return await _execute(run, pool, None, "", blocked)
        return await _execute(run, pool, existing.url, existing.token, blocked)
    server = ControlServer(replay_enabled=True, settings=run.settings)
    home = Path(tempfile.mkdtemp(prefix="bir-replay-"))
    hosts = [
        ProxyHost(name, command, project=args.project, env=proxy_environment(home), log_path=run.child_log)
        for name, command in args.wraps.items()
    ]
    try:
        run.progress("starting the control server…")
        url = await server.start()
        write_discovery(server.discovery(args.project), home=home)
        for host in hosts:
            run.progress(f"starting {host.name}: {host.command}")
            await host.start()
        run.progress(f"waiting for {', '.join(h.name for h in hosts)} to ask for work…")
        await _wait_served(server, hosts)
        return await _execute(run, pool, url, server.token, blocked)
    finally:
        # Shielded: a cancelled run still stops what it started (each stop is bounded on its own).
        with anyio.CancelScope(shield=True):
            if hosts:
                run.progress("stopping the servers it started…")
            for host in hosts:
                await host.stop()
            await server.stop()
        shutil.rmtree(home, ignore_errors=True)


async def _execute(
    run: _Run, pool: EvaluatorPool, url: str | None, token: str, blocked: Blocked | None
) -> ReplayReport:
    scenario = run.scenario
    count = len(scenario.steps)
    live = run.live

    def heard(verdict: StepVerdict) -> None:
        took = f", {verdict.duration_ms} ms" if verdict.duration_ms is not None else ""
        run.progress(
            f"step {_position(scenario, verdict.step_index) + 1} of {count}: {verdict.tool_name} {verdict.status}{took}"
        )

    # The operator named the scenario: a step it cannot send stands on its recorded output, where it has one.
    plan = ScenarioReplayPlan(scenario, run.mode, _ready(run.params), pool, recorded_fallback=True, on_step=heard)
    live.plan = plan
    # No URL: no control server runs here, and ``execute`` sends nothing (see below).
    async with ControlClient(At(url or "", token)) as control:
        direct = DirectExecutor(control, step_timeout_s=run.settings.step_timeout_ms / 1000, allow=None)

        async def execute(step: ScenarioStep, tool_input: dict[str, Any]) -> StepResult:
            position = scenario.steps.index(step)
            live.inputs[position] = tool_input
            run.progress(f"step {position + 1} of {count}: {step.tool_name}…")
            if blocked is not None and position >= blocked.position:
                return StepNotSent(blocked.why)
            if url is None:
                return StepNotSent("no control server runs for this directory")
            result = await direct(step, tool_input)
            if isinstance(result, StepRan):
                live.outputs[position] = result.output
            return result

        bundle = await plan.compose_bundle(MAX_REPLAY_REASON, execute)
        response: dict[str, Any] | None = None
        response_error: str | None = None
        if bundle.stop is None:
            try:
                response = await plan.response_model()
            except PlanError as exc:
                response_error = exc.message
    outcome: ReplayEnd = "done" if response is not None else "response_failed" if bundle.stop is None else "stopped"
    report = _report_of(run, outcome, EXIT_OK if outcome == "done" else EXIT_FAILED, blocked=blocked)
    log_event("replay.finished", scenario_id=scenario.id, exit_code=report.exit_code, steps=len(report.steps),
              mode=run.mode)  # fmt: skip
    return dataclasses.replace(report, response=response, response_error=response_error)


def _position(scenario: Scenario, step_index: int) -> int:
    return next((i for i, s in enumerate(scenario.steps) if s.step_index == step_index), 0)


def _report_of(run: _Run, outcome: ReplayEnd, exit_code: int, *, blocked: Blocked | None = None) -> ReplayReport:
    """The report of what the run's plan did so far (every step it reached, once)."""
    scenario = run.scenario
    live = run.live
    plan = live.plan
    if plan is None:
        return run.report(params=run.params, steps=(), outcome=outcome, exit_code=exit_code, blocked=blocked)
    verdicts = {v.step_index: v for v in plan.ledger}
    steps: list[StepOutcome] = []
    for position, step in enumerate(scenario.steps):
        verdict = verdicts.get(step.step_index)
        if position not in live.inputs and (verdict is None or verdict.stage == "params"):
            continue  # a step the run never reached is absent, not skipped (§11.2a)
        steps.append(
            _outcome(
                position, step, tool_input=live.inputs.get(position), output=live.outputs.get(position), verdict=verdict
            )
        )
    stop = plan.stop
    return run.report(
        params=plan.params if plan.params is not None else run.params,
        steps=tuple(steps),
        outcome=outcome,
        exit_code=exit_code,
        stop=stop,
        stop_tool=scenario.steps[stop.step].tool_name if stop is not None and stop.step is not None else None,
        note=plan.note,
        partial=stop is not None,
        blocked=blocked,
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
        partial=bool(getattr(namespace, "partial", False)),
    )
