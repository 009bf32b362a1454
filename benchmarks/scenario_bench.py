"""``bir bench eval --scenario``: how long a real scenario's own bodies take, to tune ``BIR_LOGIC_TIMEOUT_MS``.

The scenario's bodies (``paramsLogic``, each step's ``toolInputLogic`` and ``toolOutputLogic``,
``responseParamsLogic``) are first run once in order, as a replay runs them, so that each gets the
arguments it would really get: the parameters (the scenario's samples, or the prompt's derivation
when ``--prompt`` is given and derivation can run), the ``respParams`` the earlier steps built, and
each step's output: the step's own recorded output, else the source run's (``--run``, when the
service is configured), else the ``--outputs`` file's (a JSON object, step index -> output, or the
document ``bir replay --json`` prints). Then each body runs many times with those arguments in a
one-worker pool, one call at a time, and the report gives each body's p50/p99/max, the
``BIR_LOGIC_TIMEOUT_MS`` that fits with a stated margin over the slowest call (within the variable's
ceiling), the bodies within 2x of the current limit, and where the current value comes from.

Advice is given only on what was measured: when a body timed out, failed, or could not be run (no
output for its step), the report says which and why, suggests no value at all (a limit that fits the
other bodies may not fit that one), and the command exits 1.

The pool runs with the ceiling as its limit, so a body slower than the current limit is measured
instead of cut short. Every figure is measured in the run; nothing is a constant.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bir.benchmarks.stats import percentile
from bir.core import config
from bir.core.derive import derive_parameters, resolve_api_key
from bir.core.errors import LogicError
from bir.core.exits import EXIT_FAILED, EXIT_OK
from bir.core.logic import merge_resp_params
from bir.core.redact import redact_text
from bir.core.service import ServiceClient
from bir.core.source_run import RecordedOutputs, fetch_recorded_outputs, recorded_text
from bir.core.types import LogicKind, Scenario
from bir.evaluator.pool import EvaluatorPool
from bir.hooks.replay.command import ReplayUsageError, load_scenario

REPORT_VERSION: Final = 1
TIMEOUT_VARIABLE: Final = "BIR_LOGIC_TIMEOUT_MS"
CALLS: Final = 200
QUICK_CALLS: Final = 50
WARMUP: Final = 5
# The suggested limit: this many times the slowest call measured, rounded up to a step, never under
# the floor (a limit of a few ms would turn a busy machine's pause into a failed step).
MARGIN: Final = 3.0
SUGGEST_STEP_MS: Final = 50
SUGGEST_FLOOR_MS: Final = 100
NEAR_LIMIT_FACTOR: Final = 2.0
MAX_ERROR_CHARS: Final = 500
MAX_OUTPUTS_BYTES: Final = 32 * 1024 * 1024


class ScenarioBenchError(Exception):
    """The bench cannot run: the scenario, the outputs file or an option cannot be used."""


@dataclass(frozen=True, slots=True)
class BenchArgs:
    scenario: str
    prompt: str | None = None
    outputs: Path | None = None
    run_id: str | None = None
    calls: int = CALLS


@dataclass(slots=True)
class _Body:
    """One body of the scenario, with the arguments the chain gave it (None: it could not be run)."""

    label: str
    kind: LogicKind
    body: str
    args: tuple[object, ...] | None
    step_index: int | None = None
    tool_name: str | None = None
    skipped: str | None = None  # why it is not timed
    error: str | None = None  # how it failed when the chain ran it
    samples_ns: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The ``BIR_LOGIC_TIMEOUT_MS`` that fits: ``value_ms`` is ``MARGIN`` times the slowest call, rounded
    up to ``SUGGEST_STEP_MS`` and at least ``SUGGEST_FLOOR_MS``, or the ceiling when that is more
    (``fits`` then says the margin cannot be had)."""

    value_ms: int
    worst_ms: float
    margin: float
    ceiling_ms: int
    fits: bool


def suggest_timeout(worst_ms: float, ceiling_ms: int, *, margin: float = MARGIN) -> Suggestion:
    """The limit that gives the slowest measured call ``margin`` times its time, within ``ceiling_ms``."""
    wanted = max(SUGGEST_FLOOR_MS, math.ceil(worst_ms * margin / SUGGEST_STEP_MS) * SUGGEST_STEP_MS)
    return Suggestion(
        value_ms=min(wanted, ceiling_ms),
        worst_ms=worst_ms,
        margin=margin,
        ceiling_ms=ceiling_ms,
        fits=wanted <= ceiling_ms,
    )


def near_limit(max_ms: float, limit_ms: int, *, factor: float = NEAR_LIMIT_FACTOR) -> bool:
    """A body whose slowest call is within ``factor`` of the limit: doubling its time would break it."""
    return max_ms * factor >= limit_ms


def current_limit() -> dict[str, Any]:
    """``BIR_LOGIC_TIMEOUT_MS`` as in effect now: its value, where it comes from, default and ceiling.

    Raises:
        ConfigError: the variable holds something that is not a number.
    """
    variable = config.VARIABLES[TIMEOUT_VARIABLE]
    setting = next(s for s in config.rows() if s.name == TIMEOUT_VARIABLE)
    raw = os.environ.get(TIMEOUT_VARIABLE)
    return {
        "value_ms": config.load().logic_timeout_ms,
        "source": setting.source,
        "raw": raw.strip() if raw is not None and setting.source == "environment" else None,
        "default_ms": variable.default,
        "ceiling_ms": variable.ceiling,
    }


# --- the inputs ------------------------------------------------------------------------------------------


def _replay_outputs(path: Path, steps: list[Any]) -> dict[int, str]:
    """The outputs of a ``bir replay --json`` document: each step that ran, by its ``stepIndex``."""
    outputs: dict[int, str] = {}
    for step in steps:
        if not isinstance(step, dict):
            continue
        index, output = step.get("stepIndex"), step.get("output")
        if isinstance(index, int) and isinstance(output, str):
            total = step.get("outputChars")
            if isinstance(total, int) and total > len(output):
                raise ScenarioBenchError(
                    f"{path}: step {index}'s output was cut to {len(output)} of {total} characters by bir replay "
                    "--json; give the whole output instead (a JSON object, step index -> output)"
                )
            outputs[index] = output
    return outputs


def read_outputs_file(path: Path) -> dict[int, str]:
    """``--outputs``: a JSON object from step index to that step's output (text, or JSON given as text),
    or what ``bir replay --json`` prints (its steps' outputs).

    Raises:
        ScenarioBenchError: the file is missing, too large, not JSON, or neither shape.
    """
    try:
        if path.stat().st_size > MAX_OUTPUTS_BYTES:
            raise ScenarioBenchError(f"{path}: larger than {MAX_OUTPUTS_BYTES // (1024 * 1024)} MB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioBenchError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ScenarioBenchError(f"{path}: not JSON ({str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise ScenarioBenchError(f"{path}: expected an object from step index to output, or bir replay --json")
    if isinstance(data.get("steps"), list):
        return _replay_outputs(path, data["steps"])
    outputs: dict[int, str] = {}
    for key, value in data.items():
        try:
            index = int(key)
        except ValueError:
            raise ScenarioBenchError(
                f"{path}: {key[:40]!r} is not a step index (give an object from step index to output, or the "
                "document bir replay --json prints)"
            ) from None
        outputs[index] = recorded_text(value)
    return outputs


async def _params(
    args: BenchArgs, scenario: Scenario, service: ServiceClient
) -> tuple[dict[str, object], dict[str, str]]:
    """The parameters and, per name, where each came from (``sample`` or the derivation's source)."""
    params: dict[str, object] = {name: spec.sample_value for name, spec in scenario.params_object.items()}
    sources = dict.fromkeys(params, "sample")
    if args.prompt and params:
        derived = await derive_parameters(
            prompt=args.prompt,
            scenario=scenario,
            api_key=resolve_api_key(config.load()),
            service=service if service.configured else None,
            timeout_s=config.load().derive_budget_ms / 1000,
            redact=redact_text,
        )
        for name, value in derived.params.items():
            if name in params and value is not None and derived.derived:
                params[name] = value
                sources[name] = str(derived.source)
    return params, sources


async def _outputs(
    args: BenchArgs, scenario: Scenario, service: ServiceClient
) -> tuple[dict[int, str], dict[int, str]]:
    """Each step's output and where it came from: ``recorded`` (the step's own), ``source run``, ``--outputs``."""
    from_file = read_outputs_file(args.outputs) if args.outputs is not None else {}
    recorded = RecordedOutputs()
    if args.run_id and service.configured:
        recorded = await fetch_recorded_outputs(service, args.run_id)
    outputs: dict[int, str] = {}
    sources: dict[int, str] = {}
    for step in scenario.steps:
        from_run = recorded.take(step.tool_name)
        if step.recorded_output is not None:
            outputs[step.step_index], sources[step.step_index] = step.recorded_output, "recorded"
        elif from_run is not None:
            outputs[step.step_index], sources[step.step_index] = from_run, "source run"
        elif step.step_index in from_file:
            outputs[step.step_index], sources[step.step_index] = from_file[step.step_index], "--outputs"
    return outputs, sources


# --- the chain, then the timing ----------------------------------------------------------------------------


def _present(body: str | None) -> str | None:
    return body if body is not None and body.strip() else None


async def _chain(
    pool: EvaluatorPool, scenario: Scenario, params: dict[str, object], outputs: Mapping[int, str]
) -> list[_Body]:
    """Run the bodies once in a replay's order; answer each with the arguments it got."""
    bodies: list[_Body] = []

    async def once(entry: _Body) -> dict[str, Any] | None:
        bodies.append(entry)
        if entry.args is None:
            return None
        try:
            return await pool.evaluate(entry.kind, entry.body, *entry.args)
        except LogicError as exc:
            entry.error = f"{exc.reason}: {exc.message}"[:MAX_ERROR_CHARS]
            return None

    run_params = dict(params)
    body = _present(scenario.params_logic)
    if body is not None:
        result = await once(_Body("paramsLogic", "paramsLogic", body, (dict(params),)))
        if result is not None:
            run_params = result
    resp: dict[str, Any] = {}
    for step in scenario.steps:
        index, tool = step.step_index, step.tool_name
        body = _present(step.tool_input_logic)
        if body is not None:
            label = f"step {index} toolInputLogic"
            await once(_Body(label, "toolInputLogic", body, (dict(run_params), dict(resp)), index, tool))
        body = _present(step.tool_output_logic)
        if body is None:
            continue
        label = f"step {index} toolOutputLogic"
        output = outputs.get(index)
        if output is None:
            skipped = "no output for this step (the step's recorded output, --run or --outputs)"
            bodies.append(_Body(label, "toolOutputLogic", body, None, index, tool, skipped=skipped))
            continue
        entry = _Body(label, "toolOutputLogic", body, (output, dict(run_params), dict(resp)), index, tool)
        derived = await once(entry)
        if derived is not None:
            resp = merge_resp_params(resp, derived)
    body = _present(scenario.response_params_logic)
    if body is not None:
        await once(_Body("responseParamsLogic", "responseParamsLogic", body, (dict(run_params), dict(resp))))
    return bodies


async def _time(pool: EvaluatorPool, entry: _Body, calls: int) -> None:
    assert entry.args is not None
    clock = time.perf_counter_ns
    for _ in range(WARMUP):
        await pool.evaluate(entry.kind, entry.body, *entry.args)
    for _ in range(calls):
        started = clock()
        await pool.evaluate(entry.kind, entry.body, *entry.args)
        entry.samples_ns.append(clock() - started)


async def measure(args: BenchArgs, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Load the scenario, its parameters and outputs, run the chain once, time each body; the report.
    ``progress`` hears which body is being timed.

    Raises:
        ScenarioBenchError: the scenario or the outputs file cannot be used.
        RuntimeError: the pool's worker could not start.
        ConfigError: a ``BIR_*`` variable cannot be used.
    """
    if args.calls < 1:
        raise ScenarioBenchError("--calls must be at least 1")
    limit = current_limit()
    started = time.monotonic()
    async with ServiceClient() as service:
        try:
            scenario = await load_scenario(args.scenario, service)
        except ReplayUsageError as exc:
            raise ScenarioBenchError(str(exc)) from None
        params, param_sources = await _params(args, scenario, service)
        outputs, output_sources = await _outputs(args, scenario, service)
    async with EvaluatorPool(workers=1, timeout_ms=int(limit["ceiling_ms"]), max_jobs=1_000_000) as pool:
        progress("running each body once, in a replay's order…")
        bodies = await _chain(pool, scenario, params, outputs)
        for number, entry in enumerate(bodies, 1):
            if entry.args is not None and entry.error is None:
                progress(f"timing {entry.label} ({number} of {len(bodies)}), {args.calls} calls…")
                try:
                    await _time(pool, entry, args.calls)
                except LogicError as exc:  # it passed once and failed later: say so, keep what was measured
                    entry.error = f"{exc.reason}: {exc.message}"[:MAX_ERROR_CHARS]
        engine = pool.engine
    rows = [_row(entry, limit["value_ms"], output_sources) for entry in bodies]
    timed = [row for row in rows if row["calls"]]
    unmeasured = [
        {"body": row["body"], "why": row["error"] or row["skipped"]} for row in rows if row["error"] or row["skipped"]
    ]
    worst = max((row["max_ms"] for row in timed), default=None)
    # A limit that fits the measured bodies says nothing about one that was not measured: no advice then.
    suggestion = suggest_timeout(worst, int(limit["ceiling_ms"])) if worst is not None and not unmeasured else None
    return {
        "version": REPORT_VERSION,
        "scenario": {"id": scenario.id, "intent": scenario.intent, "steps": len(scenario.steps), "ref": args.scenario},
        "engine": engine,
        "calls_per_body": args.calls,
        "measured_with_timeout_ms": limit["ceiling_ms"],
        "params": {"values": params, "sources": param_sources},
        "outputs": {str(k): {"source": v, "chars": len(outputs[k])} for k, v in output_sources.items()},
        "bodies": rows,
        "current": limit,
        "suggested": None
        if suggestion is None
        else {
            "value_ms": suggestion.value_ms,
            "worst_ms": round(suggestion.worst_ms, 3),
            "margin": suggestion.margin,
            "fits_within_ceiling": suggestion.fits,
        },
        "near_limit": [row["body"] for row in timed if row["near_limit"]],
        "failed": [row["body"] for row in rows if row["error"]],
        "unmeasured": unmeasured,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "duration_s": round(time.monotonic() - started, 2),
    }


def _row(entry: _Body, limit_ms: int, output_sources: Mapping[int, str]) -> dict[str, Any]:
    ordered = sorted(entry.samples_ns)
    figures: dict[str, float | None] = {"p50_ms": None, "p99_ms": None, "max_ms": None}
    if ordered:
        figures = {
            "p50_ms": round(percentile(ordered, 0.50) / 1e6, 3),
            "p99_ms": round(percentile(ordered, 0.99) / 1e6, 3),
            "max_ms": round(ordered[-1] / 1e6, 3),
        }
    max_ms = figures["max_ms"]
    arg_bytes = len(json.dumps(list(entry.args), default=str)) if entry.args is not None else 0
    return {
        "body": entry.label,
        "kind": entry.kind,
        "step_index": entry.step_index,
        "tool_name": entry.tool_name,
        "output_source": output_sources.get(entry.step_index)
        if entry.kind == "toolOutputLogic" and entry.step_index is not None
        else None,
        "arg_bytes": arg_bytes,
        "calls": len(ordered),
        **figures,
        "near_limit": max_ms is not None and near_limit(max_ms, limit_ms),
        "skipped": entry.skipped,
        "error": entry.error,
    }


# --- for people ---------------------------------------------------------------------------------------------


def render_text(report: dict[str, Any]) -> str:
    """The report for a terminal: one line per body, then the limit in effect and the one that fits."""
    scenario = report["scenario"]
    lines = [
        f"bir bench eval --scenario {scenario['ref']}: {scenario['id'] or '(no id)'}, {scenario['steps']} steps, "
        f"{report['calls_per_body']} calls per body, one {report['engine']} worker",
    ]
    sources = report["params"]["sources"]
    if sources:
        lines.append("params: " + ", ".join(f"{name} ({src})" for name, src in sources.items()))
    lines.append("")
    lines.append(f"{'body':<28}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'args':>9}  note")
    for row in report["bodies"]:
        note = row["error"] or row["skipped"] or ""
        if row["near_limit"]:
            note = "WITHIN 2x OF THE LIMIT" + (f"; {note}" if note else "")
        if row["output_source"]:
            note = f"output from {row['output_source']}" + (f"; {note}" if note else "")
        figures = "".join(
            f"{'-' if row[k] is None else format(row[k], '.3f'):>9}" for k in ("p50_ms", "p99_ms", "max_ms")
        )
        lines.append(f"{row['body'][:27]:<28}{figures}{_size(row['arg_bytes']):>9}  {note}".rstrip())
    current = report["current"]
    lines.append("")
    where = (
        "the default" if current["source"] == "default" else f"the environment (BIR_LOGIC_TIMEOUT_MS={current['raw']})"
    )
    lines.append(
        f"BIR_LOGIC_TIMEOUT_MS is {current['value_ms']} ms, from {where}; default {current['default_ms']}, "
        f"ceiling {current['ceiling_ms']}."
    )
    suggested = report["suggested"]
    unmeasured = report["unmeasured"]
    if unmeasured:
        lines.append(f"could not measure {len(unmeasured)} of {len(report['bodies'])} bodies:")
        lines += [f"  {entry['body']}: {entry['why']}" for entry in unmeasured]
        lines.append(
            f"no {TIMEOUT_VARIABLE} is suggested: a limit that fits the bodies measured may not fit these. Give each "
            "step an output (--outputs FILE, --run RUN_ID) or fix the body that fails, then run this again."
        )
    elif suggested is None:
        lines.append("no body could be timed: nothing to suggest.")
    else:
        wanted = suggested["worst_ms"] * suggested["margin"]
        if not suggested["fits_within_ceiling"]:
            why = f"the ceiling: {suggested['margin']:g}x the slowest call would be {wanted:.0f} ms"
        elif suggested["value_ms"] == SUGGEST_FLOOR_MS and wanted < SUGGEST_FLOOR_MS:
            why = f"the {SUGGEST_FLOOR_MS} ms floor; {suggested['margin']:g}x the slowest call is {wanted:.1f} ms"
        else:
            why = f"{suggested['margin']:g}x the slowest call, rounded up to {SUGGEST_STEP_MS} ms"
        lines.append(
            f"the slowest call took {suggested['worst_ms']:.3f} ms; "
            f"{TIMEOUT_VARIABLE}={suggested['value_ms']} fits ({why})."
        )
    near = report["near_limit"]
    lines.append(f"within 2x of the current limit: {', '.join(near) if near else 'none'}.")
    lines.append(f"took {report['duration_s']:.1f} s; load {' '.join(f'{x:.2f}' for x in report['loadavg'])}")
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB"


def run_scenario_bench(args: BenchArgs, *, as_json: bool, progress: Callable[[str], None] = lambda _: None) -> int:
    """Run the bench and print it (one JSON document with ``as_json``); 0 every body measured, 1 a body
    could not be (no limit is suggested) or the bench could not run.

    Raises:
        ScenarioBenchError: the scenario, the outputs file or an option cannot be used (usage).
        RuntimeError: the pool's worker could not start.
        ConfigError: a ``BIR_*`` variable cannot be used.
    """
    report = asyncio.run(measure(args, progress))
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n" if as_json else render_text(report))
    return EXIT_FAILED if report["unmeasured"] else EXIT_OK


def main_args(namespace: Any) -> BenchArgs:
    """argparse's namespace as ``BenchArgs``."""
    outputs: str | None = namespace.outputs
    return BenchArgs(
        scenario=namespace.scenario,
        prompt=namespace.prompt,
        outputs=Path(outputs).expanduser() if outputs else None,
        run_id=namespace.run,
        calls=namespace.calls if namespace.calls is not None else (QUICK_CALLS if namespace.quick else CALLS),
    )


__all__: Sequence[str] = [
    "BenchArgs",
    "ScenarioBenchError",
    "Suggestion",
    "current_limit",
    "main_args",
    "measure",
    "near_limit",
    "read_outputs_file",
    "render_text",
    "run_scenario_bench",
    "suggest_timeout",
]
