"""``bir bench proxy``: what ``bir-proxy`` adds to a ``tools/call``, and what a direct step costs.

Three MCP SDK client sessions over stdio stay open at once: straight to the demo upstream
(``examples/fleet_server.py``), through a plain relay (``--no-control``), and through a proxy that
knows an in-process control server (so ``__bir_call_id__`` is declared and stripped, and every call
is reported to ``/proxy/step``). Each round runs every measurement once, in an order rotated from
round to round, so a drift in the machine's load falls on all of them alike and the ratios of one
run compare like with like.

A direct step goes control server → work queue → long-poll answer → proxy → upstream →
``/proxy/result`` → caller. The proxy runs work only while a host session with it is initialized,
which the third client session is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from bir import __version__
from bir.benchmarks.proxy_bench_report import TOOLS, VARIANTS, build_report, render_table
from bir.core.log import log_event
from bir.hooks.api import CALL_ID_KEY
from bir.hooks.commands.result import print_refusal
from bir.hooks.discovery import write_discovery
from bir.hooks.server.control import ControlServer
from bir.hooks.server.routes import NoSession, ReceivedStep

# The demo upstream ships inside the package, so the bench runs from an installed wheel too.
FLEET_MODULE: Final = "bir.examples.fleet_server"
SERVER_NAME: Final = "fleet"
# The demo fleet's regions and size (examples/fleet_server.py, which never imports bir).
_REGIONS: Final = ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1")
_FLEET_SIZE: Final = 30

_CALL_TIMEOUT_S: Final = 10.0
_SERVED_TIMEOUT_S: Final = 30.0
_REPORT_TIMEOUT_S: Final = 5.0
# The whole run's bound: start-up, then a loose allowance per measured operation.
_BASE_BUDGET_S: Final = 120.0
_PER_OP_BUDGET_S: Final = 0.25
_STDERR_TAIL_CHARS: Final = 1200
_ERROR_CHARS: Final = 600


@dataclass(frozen=True)
class Plan:
    """How many rounds to run: ``warmup`` discarded, then ``iterations`` measured."""

    warmup: int
    iterations: int


QUICK: Final = Plan(warmup=20, iterations=200)
FULL: Final = Plan(warmup=100, iterations=1000)


# samples[tool][variant] in ns, the direct steps' round trips in ns, the step reports received.
_Measured = tuple[dict[str, dict[str, list[int]]], list[int], int]


class BenchError(Exception):
    """The bench cannot measure what it claims to (a call failed, the control path is not active)."""


class _StepReports(NoSession):
    """Counts the control-known proxy's step reports that carry one of the bench's call ids."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    async def on_step(self, received: ReceivedStep) -> None:
        call_id = received.report.call_id
        if call_id is not None and call_id.startswith("bench-"):
            self.count += 1
            self._changed.set()
            self._changed = anyio.Event()

    async def reach(self, count: int) -> None:
        while self.count < count:
            await self._changed.wait()


def plan_for(*, quick: bool, iterations: int | None = None) -> Plan:
    """The rounds to run: `QUICK` or `FULL`, or ``iterations`` measured rounds (tests).

    Raises:
        ValueError: ``iterations`` is below 1.
    """
    base = QUICK if quick else FULL
    if iterations is None:
        return base
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    return Plan(warmup=min(base.warmup, max(1, iterations // 5)), iterations=iterations)


def run_proxy_bench(
    *, quick: bool, as_json: bool, iterations: int | None = None, progress: Callable[[str], None] = lambda _: None
) -> int:
    """Run the bench and print its table (or, with ``as_json``, one JSON document) on stdout.

    ``iterations`` overrides the measured rounds; it is for tests and is not on the command line.
    Returns 0, or 1 with one line on stderr when the bench could not run.

    Raises:
        ValueError: ``iterations`` is below 1.
    """
    plan = plan_for(quick=quick, iterations=iterations)
    with tempfile.TemporaryDirectory(prefix="bir-bench-proxy-") as tmp:
        workdir = Path(tmp)
        stderr_path = workdir / "servers.stderr"
        try:
            with stderr_path.open("w", encoding="utf-8") as errlog:
                report = anyio.run(_bench, plan, quick, workdir, errlog, progress, backend="asyncio")
        except Exception as exc:  # noqa: BLE001 - one line, never a traceback, whatever failed
            tail = _tail(stderr_path)
            log_event("bench.proxy_failed", error=_describe(exc)[:_ERROR_CHARS], stderr_tail=tail)
            print_refusal(
                "bir bench proxy", "could_not_measure", _describe(exc)[:_ERROR_CHARS], as_json=as_json,
                out=sys.stdout, err=sys.stderr,
            )  # fmt: skip
            return 1
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_table(report))
    return 0


async def _bench(
    plan: Plan, quick: bool, workdir: Path, errlog: TextIO, progress: Callable[[str], None]
) -> dict[str, Any]:
    if importlib.util.find_spec(FLEET_MODULE) is None:
        raise BenchError(f"the demo upstream is missing: {FLEET_MODULE}")
    load_start = os.getloadavg()[0]
    started_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    ops = 2 * len(VARIANTS) + 1
    with anyio.fail_after(_BASE_BUDGET_S + (plan.warmup + plan.iterations) * ops * _PER_OP_BUDGET_S):
        samples, steps, reports = await _measure(plan, workdir, errlog, progress)
    meta = {
        "bench": "proxy",
        "version": __version__,
        "quick": quick,
        "warmup": plan.warmup,
        "iterations": plan.iterations,
        "started_at": started_at,
        "loadavg_1m": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count() or 0,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "upstream": FLEET_MODULE,
        "step_reports": reports,
    }
    return build_report(samples, steps, meta=meta)


async def _measure(plan: Plan, workdir: Path, errlog: TextIO, progress: Callable[[str], None]) -> _Measured:
    home, project = workdir / "home", workdir / "project"
    home.mkdir()
    project.mkdir()
    reports = _StepReports()
    control = ControlServer(handler=reports, replay_enabled=True)
    try:
        await control.start()
        # The proxy finds the control server through discovery under its own BIR_HOME.
        write_discovery(control.discovery(project), home=home)
        progress("starting the demo fleet three ways (bare, relayed, relayed with a control server)…")
        async with AsyncExitStack() as stack:
            fleet = [sys.executable, "-m", FLEET_MODULE]
            relay = [sys.executable, "-m", "bir.proxy", "--server-name", SERVER_NAME]
            direct = await stack.enter_async_context(_session(fleet, home, errlog))
            plain = await stack.enter_async_context(_session([*relay, "--no-control", "--", *fleet], home, errlog))
            known = await stack.enter_async_context(
                _session([*relay, "--project", str(project), "--", *fleet], home, errlog)
            )
            await _until_served(control)
            await _check_declared(known, declared=True)
            await _check_declared(plain, declared=False)
            clients = {"direct": direct, "relayed": plain, "relayed_control": known}
            return await _rounds(plan, clients, control, reports, progress)
    finally:
        with anyio.CancelScope(shield=True):
            await control.stop()


async def _rounds(
    plan: Plan,
    clients: dict[str, Client],
    control: ControlServer,
    reports: _StepReports,
    progress: Callable[[str], None],
) -> _Measured:
    samples: dict[str, dict[str, list[int]]] = {tool: {variant: [] for variant in VARIANTS} for tool in TOOLS}
    steps: list[int] = []
    sent = 0

    def tools_call(tool: str, variant: str) -> Callable[[int, bool], Awaitable[None]]:
        async def op(round_no: int, keep: bool) -> None:
            nonlocal sent
            arguments = _arguments(tool, round_no)
            if variant == "relayed_control":
                sent += 1
                arguments[CALL_ID_KEY] = f"bench-{sent}"
            began = time.perf_counter_ns()
            result = await clients[variant].call_tool(tool, arguments, read_timeout_seconds=_CALL_TIMEOUT_S)
            took = time.perf_counter_ns() - began
            if result.is_error:
                raise BenchError(f"{tool} {variant} answered an error: {_text(result.model_dump(mode='json'))}")
            if variant == "relayed_control":
                # Let the report land before the next timed call, so its handling is not timed.
                with anyio.move_on_after(_REPORT_TIMEOUT_S):
                    await reports.reach(sent)
                if reports.count < sent:
                    raise BenchError(f"the proxy did not report a call to /proxy/step within {_REPORT_TIMEOUT_S:.0f} s")
            if keep:
                samples[tool][variant].append(took)

        return op

    async def direct_step(round_no: int, keep: bool) -> None:
        arguments = _arguments("get_device", round_no)
        began = time.perf_counter_ns()
        result = await control.queue.call(SERVER_NAME, "get_device", arguments, timeout_s=_CALL_TIMEOUT_S)
        took = time.perf_counter_ns() - began
        if not isinstance(result, dict) or result.get("isError"):
            raise BenchError(f"the direct step answered an error: {_text(result)}")
        if keep:
            steps.append(took)

    ops = [tools_call(tool, variant) for tool in TOOLS for variant in VARIANTS] + [direct_step]
    rounds = plan.warmup + plan.iterations
    for round_no in range(rounds):
        progress(f"round {round_no + 1} of {rounds}{' (warm-up)' if round_no < plan.warmup else ''}…")
        shift = round_no % len(ops)
        for op in ops[shift:] + ops[:shift]:
            await op(round_no, round_no >= plan.warmup)
    return samples, steps, reports.count


@asynccontextmanager
async def _session(command: list[str], home: Path, errlog: TextIO) -> AsyncIterator[Client]:
    # The SDK's shutdown closes stdin, waits, then kills the process tree: nothing is left behind.
    params = StdioServerParameters(command=command[0], args=command[1:], env={"BIR_HOME": str(home)}, cwd=str(home))
    async with Client(
        stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=_CALL_TIMEOUT_S
    ) as client:
        yield client


async def _until_served(control: ControlServer) -> None:
    try:
        with anyio.fail_after(_SERVED_TIMEOUT_S):
            while not control.queue.is_served(SERVER_NAME):  # noqa: ASYNC110 - the proxy registers from another process
                await anyio.sleep(0.02)
    except TimeoutError:
        raise BenchError(
            f"the proxy did not register with the control server within {_SERVED_TIMEOUT_S:.0f} s"
        ) from None


async def _check_declared(client: Client, *, declared: bool) -> None:
    listed = await client.list_tools()
    tool = next((t for t in listed.tools if t.name == "get_device"), None)
    if tool is None:
        raise BenchError("the demo upstream does not list get_device")
    if (CALL_ID_KEY in tool.input_schema.get("properties", {})) != declared:
        where = "a proxy that knows the control server" if declared else "the plain relay"
        raise BenchError(f"{where} {'did not declare' if declared else 'declared'} {CALL_ID_KEY}")


def _arguments(tool: str, round_no: int) -> dict[str, Any]:
    if tool == "get_device":
        return {"id": f"dev-{round_no % _FLEET_SIZE + 1:03d}"}
    return {"region": _REGIONS[round_no % len(_REGIONS)]}


def _text(value: object) -> str:
    return json.dumps(value, default=str)[:_ERROR_CHARS]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "the bench ran past its time budget"
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, BenchError) else str(exc)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-_STDERR_TAIL_CHARS:].decode("utf-8", "replace")
