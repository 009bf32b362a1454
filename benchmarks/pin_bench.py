"""``bir bench pin``: what a pinned tool call costs between the model's call and the tool running.

Measured side by side in one run, against one control server with a live controller and evaluator pool
(``bir.benchmarks.armed_pin``):

- **the whole hook as Claude Code runs it**: ``bir-hook PreToolUse`` from process start to its printed
  answer (the process has exited), beside a bare ``python3 -S`` command hook printing ``{}``, the same
  with ``site`` imported, and ``true``; p50/p90/p99 and the ratios. Goal: ``bir-hook``'s p50 within
  1.3x of the bare Python hook's.
- **the server side**: the same PreToolUse POSTed over a kept-alive connection for a session with no
  plan (the no-work route), and for an armed steer plan's expected step (its ``toolInputLogic`` in the
  pool, the pin guard, the §7.1 merge), for a trivial body and for one reading a 24 KB earlier output.
  Goal: the replay share (armed p50 minus no-work p50) within 1 ms.
- **the whole session** (``bir.benchmarks.session_bench``), when a Claude Code binary is at hand.

The control server runs in a thread of this process with its own event loop, announced only in a
temporary ``BIR_HOME`` for a temporary project, so no session of the user sees it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from bir.benchmarks.armed_pin import (
    PRE_TOOL_ROUTE,
    BenchServer,
    PinBody,
    PinMeasureError,
    expected_pin,
    pinned_input,
    pre_tool_body,
    time_pins,
)
from bir.benchmarks.machine import machine_facts
from bir.benchmarks.session_bench import SessionBenchError, find_claude_binary, measure_sessions
from bir.benchmarks.stats import percentile
from bir.core import log
from bir.hooks import api
from bir.hooks.commands.result import print_refusal
from bir.hooks.discovery import write_discovery

REPORT_VERSION: Final = 1
GOAL_HOOK_VS_PYTHON: Final = 1.3
CALL_TIMEOUT_S: Final = 30.0
MAX_ERROR_CHARS: Final = 500
GOAL_REPLAY_SHARE_MS: Final = 1.0
# A tool call in a real session under the default install, against the same call with no hooks (p50).
GOAL_SESSION_VS_NO_HOOKS: Final = 1.1
PIN_BODIES: Final[tuple[PinBody, ...]] = ("trivial", "reads_24kb")


@dataclass(frozen=True, slots=True)
class Counts:
    warmup: int
    calls: int
    # The whole session: tool calls per session, sessions per variant.
    session_calls: int = 6
    session_rounds: int = 1


QUICK: Final = Counts(warmup=3, calls=30, session_calls=6, session_rounds=1)
FULL: Final = Counts(warmup=5, calls=200, session_calls=10, session_rounds=4)


class PinBenchError(Exception):
    """The bench could not measure (a command failed, the server did not start)."""


def run_hook_once(argv: Sequence[str], stdin: bytes, env: dict[str, str]) -> int:
    """Run one command hook with ``stdin``: its duration (ns) from the start of the process to its exit
    with its answer read.

    Raises:
        PinBenchError: it failed or printed something other than a JSON object (``true`` prints nothing).
    """
    started = time.perf_counter_ns()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=CALL_TIMEOUT_S, check=False)
    elapsed = time.perf_counter_ns() - started
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace")[-MAX_ERROR_CHARS:]
        raise PinBenchError(f"{' '.join(argv)[:200]} exited {done.returncode}: {tail}")
    if argv[0] != _true() and not _is_object(done.stdout):
        raise PinBenchError(f"{' '.join(argv)[:200]} printed {done.stdout[:200]!r}, not a JSON object")
    return elapsed


def time_commands(
    commands: dict[str, Sequence[str]], stdin: bytes, env: dict[str, str], *, calls: int, warmup: int
) -> dict[str, list[int]]:
    """Each command ``warmup + calls`` times, taken in turn (so that a change of the machine's load falls
    on all of them alike); per command, one duration (ns) per timed run.

    Raises:
        PinBenchError: a run failed (see ``run_hook_once``).
    """
    samples: dict[str, list[int]] = {name: [] for name in commands}
    for i in range(warmup + calls):
        for name, argv in commands.items():
            elapsed = run_hook_once(argv, stdin, env)
            if i >= warmup:
                samples[name].append(elapsed)
    return samples


def time_route(url: str, token: str, route: str, body: dict[str, Any], *, calls: int, warmup: int) -> list[int]:
    """POST ``body`` to ``route`` of a control server ``warmup + calls`` times over one kept-alive
    connection; one duration (ns) per timed call. The seam for the server side of a pin: arm a plan,
    then time its expected step's PreToolUse with this.

    Raises:
        PinBenchError: an answer was not 200 with a JSON object.
    """
    samples: list[int] = []
    clock = time.perf_counter_ns
    data = json.dumps(body).encode()
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    with httpx.Client(base_url=url, trust_env=False, timeout=CALL_TIMEOUT_S) as client:
        for i in range(warmup + calls):
            started = clock()
            response = client.post(route, content=data, headers=headers)
            elapsed = clock() - started
            if response.status_code != 200 or not _is_object(response.content):
                raise PinBenchError(f"{route} answered {response.status_code}: {response.text[:200]!r}")
            if i >= warmup:
                samples.append(elapsed)
    return samples


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _true() -> str:
    return shutil.which("true") or "/bin/true"


def hook_command() -> list[str]:
    """``bir-hook`` as ``bir install`` writes it: the console script beside this interpreter, else the module."""
    script = Path(sys.executable).parent / "bir-hook"
    if script.exists():
        return [str(script), "PreToolUse"]
    return [sys.executable, "-m", "bir.hooks.hook_client", "PreToolUse"]


def pin_check(body: PinBody) -> Callable[[dict[str, Any]], str | None]:
    """What is wrong with an armed PreToolUse's answer (None: it pinned the step's arguments with a call id)."""
    expected = expected_pin(body)

    def check(answer: dict[str, Any]) -> str | None:
        pinned = pinned_input(answer)
        if pinned is None:
            return f"the answer was {json.dumps(answer)[:300]}"
        call_id = pinned.pop(api.CALL_ID_KEY, None)
        if not isinstance(call_id, str):
            return "the pinned arguments carry no call id (§7.1)"
        if pinned != expected:
            return f"pinned {json.dumps(pinned)[:300]}, not {json.dumps(expected)[:300]}"
        return None

    return check


def measure(
    counts: Counts, *, mode: str, claude: Path | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Start a control server with a live controller for a temporary project; time the hooks, the
    no-work route and the two armed pins, and with a Claude Code binary (``claude``) the whole session;
    the report. ``progress`` hears which part is being measured.

    Raises:
        PinBenchError: a command failed, the server did not start or answered badly, a pin did not pin,
            or a session could not be measured.
    """
    started = time.monotonic()
    load_before = os.getloadavg()
    home = Path(tempfile.mkdtemp(prefix="bir-bench-pin-"))
    bench = BenchServer()
    # The server's log lines go to the temporary home, as a detached server's go to its log file.
    logging = log.logging_to(home / "logs" / "control.log")
    logging.__enter__()
    try:
        project = home / "project"
        project.mkdir()
        url = bench.start()
        token = bench.server.token
        write_discovery(bench.server.discovery(project), home=home)
        body = pre_tool_body("bench-pin", project)
        stdin = json.dumps(body).encode()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("BIR_")},
            "BIR_HOME": str(home),
            "CLAUDE_PROJECT_DIR": str(project),
        }
        n = {"calls": counts.calls, "warmup": counts.warmup}
        commands: dict[str, Sequence[str]] = {
            "true": [_true()],
            "python_bare": [sys.executable, "-S", "-c", 'print("{}")'],
            "python_site": [sys.executable, "-c", 'print("{}")'],
            "bir_hook": hook_command(),
        }
        progress(f"timing bir-hook beside bare command hooks ({counts.warmup + counts.calls} rounds)…")
        series = time_commands(commands, stdin, env, **n)
        progress("timing the PreToolUse route with no replay work…")
        series["route_no_work"] = time_route(url, token, PRE_TOOL_ROUTE, body, **n)
        for kind in PIN_BODIES:
            progress(f"timing an armed pin ({kind.replace('_', ' ')})…")
            series[f"pin_{kind}"] = time_pins(
                url, token, functools.partial(bench.arm, kind, f"bench-armed-{kind}", project), pin_check(kind), **n
            )
        hook_log = home / "logs" / "hook.log"
        if hook_log.exists():
            # The hook printed {} because it failed to reach the server: not the figure we came for.
            raise PinBenchError(f"bir-hook could not reach the control server: {hook_log.read_text()[-300:]}")
    except PinMeasureError as exc:
        raise PinBenchError(str(exc)) from None
    finally:
        bench.stop()
        logging.__exit__(None, None, None)
        shutil.rmtree(home, ignore_errors=True)
    if claude is not None:
        progress(f"timing whole Claude Code sessions ({claude})…")
    try:
        session = measure_sessions(claude, calls=counts.session_calls, rounds=counts.session_rounds)
    except SessionBenchError as exc:
        raise PinBenchError(str(exc)) from None
    figures = {name: _latency(samples) for name, samples in series.items()}
    ratio = _ratio(figures["bir_hook"]["p50_ms"], figures["python_bare"]["p50_ms"])
    no_work = figures["route_no_work"]
    shares = {kind: round(figures[f"pin_{kind}"]["p50_ms"] - no_work["p50_ms"], 3) for kind in PIN_BODIES}
    worst_share = max(shares.values())
    return {
        "version": REPORT_VERSION,
        "mode": mode,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        # An editable install's finder is imported by site at every start: a cost a wheel install has not.
        "machine": machine_facts(load_before, editable_install=_editable_install()),
        "settings": {
            "calls": counts.calls,
            "warmup": counts.warmup,
            "hook": hook_command(),
            "session_calls": counts.session_calls,
            "session_rounds": counts.session_rounds,
        },
        "hook_process": {k: figures[k] for k in ("true", "python_bare", "python_site", "bir_hook")},
        "server_side": {
            "route_no_work": no_work,
            "armed_pin": {kind: figures[f"pin_{kind}"] for kind in PIN_BODIES},
            "replay_share_p50_ms": shares,
        },
        "session": session,
        "ratios": {
            "bir_hook_vs_python_bare_p50": ratio,
            "bir_hook_vs_python_bare_p90": _ratio(figures["bir_hook"]["p90_ms"], figures["python_bare"]["p90_ms"]),
            "bir_hook_vs_python_site_p50": _ratio(figures["bir_hook"]["p50_ms"], figures["python_site"]["p50_ms"]),
            "python_bare_vs_true_p50": _ratio(figures["python_bare"]["p50_ms"], figures["true"]["p50_ms"]),
            "route_share_of_bir_hook_p50": _ratio(no_work["p50_ms"], figures["bir_hook"]["p50_ms"]),
            **{
                f"pin_{kind}_vs_route_no_work_p50": _ratio(figures[f"pin_{kind}"]["p50_ms"], no_work["p50_ms"])
                for kind in PIN_BODIES
            },
        },
        "goals": [
            {
                "goal": f"bir-hook p50 within {GOAL_HOOK_VS_PYTHON:g}x of a bare python3 -S hook's",
                "value": ratio,
                "target": GOAL_HOOK_VS_PYTHON,
                "unit": "x",
                "met": ratio is not None and ratio <= GOAL_HOOK_VS_PYTHON,
            },
            {
                "goal": f"server-side replay share p50 within {GOAL_REPLAY_SHARE_MS:g} ms of the no-work route "
                "(an armed steer plan, the worse of its two bodies)",
                "value": worst_share,
                "target": GOAL_REPLAY_SHARE_MS,
                "unit": "ms",
                "met": worst_share <= GOAL_REPLAY_SHARE_MS,
            },
            _session_goal(session),
        ],
        "duration_s": round(time.monotonic() - started, 1),
    }


def _session_goal(session: dict[str, Any]) -> dict[str, Any]:
    goal = (
        "in a real Claude Code session, a tool call under the default install (bir install) takes at most "
        f"{GOAL_SESSION_VS_NO_HOOKS:g}x its time with no hooks, p50"
    )
    if not session["measured"]:
        target = GOAL_SESSION_VS_NO_HOOKS
        return {"goal": goal, "value": None, "target": target, "unit": "x", "met": None, "why": session["why"]}
    value = session["vs_no_hooks_p50"]["bir_default"]
    return {
        "goal": goal,
        "value": value,
        "target": GOAL_SESSION_VS_NO_HOOKS,
        "unit": "x",
        "met": value is not None and value <= GOAL_SESSION_VS_NO_HOOKS,
    }


def _editable_install() -> bool:
    import importlib.metadata

    try:
        files = importlib.metadata.files("bir") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(str(f).startswith("__editable__") for f in files)


def _latency(samples_ns: Sequence[int]) -> dict[str, Any]:
    ordered = sorted(samples_ns)
    p50, p90, p99 = (round(percentile(ordered, f) / 1e6, 3) for f in (0.50, 0.90, 0.99))
    return {"calls": len(ordered), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def render_table(report: dict[str, Any]) -> str:
    """The report for a terminal: one row per series, the ratios and the goals."""
    machine = report["machine"]
    load = " ".join(f"{x:.2f}" for x in machine["loadavg_before"])
    lines = [
        f"bir bench pin ({report['mode']}): {report['settings']['calls']} calls per row, "
        f"{machine['cpus']} CPUs, load {load}" + (", editable install" if machine["editable_install"] else ""),
        "",
        f"{'':<48}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}",
    ]
    names = {
        "true": "true (a command hook doing nothing)",
        "python_bare": "python3 -S -c 'print(\"{}\")'",
        "python_site": "python3 -c 'print(\"{}\")' (with site)",
        "bir_hook": "bir-hook PreToolUse (server answering)",
    }
    rows = [(names[k], v) for k, v in report["hook_process"].items()]
    server = report["server_side"]
    rows.append(("POST /tool/pre, no replay work", server["route_no_work"]))
    pins = {"trivial": "POST /tool/pre, armed pin, trivial body", "reads_24kb": "POST /tool/pre, armed pin, 24 KB read"}
    rows += [(pins[k], v) for k, v in server["armed_pin"].items()]
    for label, row in rows:
        lines.append(f"{label:<48}{row['p50_ms']:>9.3f}{row['p90_ms']:>9.3f}{row['p99_ms']:>9.3f}")
    ratios = report["ratios"]
    shares = server["replay_share_p50_ms"]
    lines.append("")
    lines.append(
        f"bir-hook / bare python: p50 {_times(ratios['bir_hook_vs_python_bare_p50'])}, "
        f"p90 {_times(ratios['bir_hook_vs_python_bare_p90'])}; bir-hook / python with site: "
        f"{_times(ratios['bir_hook_vs_python_site_p50'])}; bare python / true: "
        f"{_times(ratios['python_bare_vs_true_p50'])}"
    )
    lines.append(
        "replay share over the no-work route, p50: "
        + ", ".join(f"{kind} {share:+.3f} ms" for kind, share in shares.items())
    )
    lines += _session_lines(report["session"])
    lines.append("goals:")
    for goal in report["goals"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[goal["met"]]
        value, unit, target = goal["value"], goal.get("unit", "x"), goal["target"]
        shown = "" if value is None else f": {value:g}{' ms' if unit == 'ms' else 'x'}"
        if value is not None and target is not None:
            shown += f" (target {target:g}{' ms' if unit == 'ms' else 'x'})"
        lines.append(f"  [{verdict}] {goal['goal']}{shown}")
    lines.append(f"took {report['duration_s']:.1f} s")
    return "\n".join(lines) + "\n"


def _session_lines(session: dict[str, Any]) -> list[str]:
    if not session["measured"]:
        return [f"whole session: {session['why']}"]
    names = {
        "no_hooks": "no hooks",
        "python_hooks": "two bare python3 -S hooks",
        "mcp_hooks": "two mcp_tool hooks on an empty MCP server",
        "bir_default": "bir install (mcp_tool hooks, the default)",
        "bir_replay": "bir install --replay",
        "bir_command_hooks": "bir install --command-hooks",
    }
    lines = [
        "",
        f"whole session ({session['rounds']} x {session['calls_per_session']} Bash calls per variant), "
        "one tool call, model request to model request:",
        f"{'':<48}{'p50 ms':>9}{'p90 ms':>9}{'added':>9}{'x none':>9}",
    ]
    added, versus = session["added_per_call_p50_ms"], session["vs_no_hooks_p50"]
    for variant, row in session["tool_call"].items():
        extra = "" if variant == "no_hooks" else f"{added[variant]:>+9.1f}{_times(versus[variant]):>9}"
        lines.append(f"{names[variant]:<48}{row['p50_ms']:>9.1f}{row['p90_ms']:>9.1f}{extra}")
    return lines


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def run_pin_bench(
    *,
    quick: bool,
    as_json: bool,
    counts: Counts | None = None,
    claude: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Run the bench and print a table, or one JSON document; 0 when it measured, 1 when it could not.
    ``claude``: the Claude Code binary for the whole session (``bir bench pin --claude``), else the one
    ``find_claude_binary`` finds."""
    chosen = counts if counts is not None else (QUICK if quick else FULL)
    binary = claude if claude is not None else find_claude_binary()
    try:
        report = measure(chosen, mode="quick" if quick else "full", claude=binary, progress=progress)
    except (PinBenchError, PinMeasureError, OSError, subprocess.TimeoutExpired, httpx.HTTPError) as exc:
        print_refusal(
            "bir bench pin", "could_not_measure", str(exc)[:MAX_ERROR_CHARS], as_json=as_json, out=sys.stdout,
            err=sys.stderr,
        )  # fmt: skip
        return 1
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if as_json else render_table(report))
    return 0
