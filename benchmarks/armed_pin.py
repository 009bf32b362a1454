"""The server side of a pin, measured: a control server with the live controller, and steer plans armed on it.

``BenchServer`` runs a ``ControlServer`` with a real ``Controller`` and ``EvaluatorPool`` on an event loop
of its own (a daemon thread), so the bench's thread can time HTTP calls against it the way a hook makes
them. Before each timed ``PreToolUse`` the bench arms a fresh steer plan on the controller's session table
(``arm``): a ``Run`` holding a ``ScenarioReplayPlan`` whose parameters are already resolved and
``paramsLogic`` applied (what arming at the prompt leaves behind), and a ``SteerState``. A fresh plan per
call means no pin is ever in flight when the next arrives (a second pin waits for the first by design).

The plan is not previewed, so the pinned step's ``toolInputLogic`` runs in the pool inside the timed call
(a previewed step whose input reads no earlier output costs less). The step's tool is a wrapped MCP tool
with a registered proxy, so the answer goes through the pin guard and the §7.1 merge (a call id minted).

Two plans: a trivial body, and a body that parses a 24 KB output an earlier step threaded into
``respParams`` (that step is pinned and threaded while arming, outside the timed call).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import httpx

from bir.core.plan import ScenarioReplayPlan
from bir.core.service import ServiceClient
from bir.core.types import Scenario, parse_scenario
from bir.evaluator import EvaluatorPool
from bir.hooks.server.control import ControlServer
from bir.hooks.server.work_queue import ProxyWorkQueue
from bir.hooks.session.controller import Controller
from bir.hooks.session.recorder import Recorder
from bir.hooks.session.state import Run, SteerState
from bir.hooks.session.switches import Switches

START_TIMEOUT_S: Final = 30.0
CALL_TIMEOUT_S: Final = 30.0
PRE_TOOL_ROUTE: Final = "/tool/pre"
# The wrapped MCP server the armed steps call; the bench registers a proxy for it so the §7.1 merge mints an id.
BENCH_SERVER: Final = "benchfleet"
LIST_TOOL: Final = f"mcp__{BENCH_SERVER}__list_devices"
SHOW_TOOL: Final = f"mcp__{BENCH_SERVER}__show_device"
BENCH_PROXY_ID: Final = "bench-proxy"
EARLIER_OUTPUT_BYTES: Final = 24 * 1024
PARAMS: Final[Mapping[str, object]] = {"region": "eu-west-1"}

PinBody = Literal["trivial", "reads_24kb"]
T = TypeVar("T")


class PinMeasureError(Exception):
    """An armed pin could not be measured: the server did not start, or it did not pin the expected call."""


def _scenario(body: PinBody) -> Scenario:
    """A steer scenario whose last step is the one timed."""
    trivial = {
        "stepIndex": 0,
        "toolName": LIST_TOOL,
        "toolInputLogic": "return { region: params.region };",
        "reasoning": "list the region's devices",
    }
    if body == "trivial":
        steps: list[dict[str, Any]] = [trivial]
    else:
        steps = [
            # The whole listing is kept in respParams, so the next body reads all of it.
            {**trivial, "toolOutputLogic": "return { listing: toolOutput };"},
            {
                "stepIndex": 1,
                "toolName": SHOW_TOOL,
                "toolInputLogic": (
                    "const rows = JSON.parse(respParams.listing);"
                    " rows.sort((a, b) => b.risk - a.risk);"
                    " return { region: params.region, id: rows[0].id };"
                ),
                "reasoning": "show the riskiest device",
            },
        ]
    return parse_scenario(
        {
            "id": f"scn_bench_{body}",
            "state": "ready",
            "intent": "bench: pin a step",
            "paramsObject": {"region": {"sampleValue": "eu-west-1", "role": "target"}},
            "paramsLogic": "return params;",
            "steps": steps,
        }
    )


@functools.cache
def earlier_output(size: int = EARLIER_OUTPUT_BYTES) -> str:
    """A device listing (a JSON array in a string) of about ``size`` characters."""
    rows: list[dict[str, Any]] = []
    text = "[]"
    i = 0
    while len(text) < size:
        rows.append({"id": f"dev-{i:05d}", "region": "eu-west-1", "risk": (i * 37) % 101, "model": "edge-gw-2"})
        i += 1
        if i % 16 == 0:
            text = json.dumps(rows)
    return json.dumps(rows)


def expected_pin(body: PinBody) -> dict[str, Any]:
    """The arguments the timed step pins (without the §7.1 call id): computed here, apart from the bodies."""
    if body == "trivial":
        return dict(PARAMS)
    riskiest = max(json.loads(earlier_output()), key=lambda row: row["risk"])
    return {**PARAMS, "id": riskiest["id"]}


def model_call(body: PinBody) -> tuple[str, dict[str, Any]]:
    """The call the model makes for the timed step: its tool and arguments (sharing a key with the step's)."""
    if body == "trivial":
        return LIST_TOOL, {"region": "eu-west-1"}
    return SHOW_TOOL, {"region": "eu-west-1", "id": "dev-00000"}


class _NoReports:
    """The bench's runs hold no ticket, so no report is ever drafted; this sink takes none."""

    def draft_report(self, ticket: str, scenario_id: str, body: Mapping[str, Any]) -> bool:
        return False

    def finalize_report(self, ticket: str, body: Mapping[str, Any] | None, *, scenario_id: str | None = None) -> bool:
        return False


async def _resolved(params: Mapping[str, object]) -> Mapping[str, object]:
    return params


class BenchServer:
    """A ``ControlServer`` with a live ``Controller`` and ``EvaluatorPool`` on its own loop in a daemon thread."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.queue = ProxyWorkQueue()
        self.wrapped: set[str] = {BENCH_SERVER}
        self._server: ControlServer | None = None
        self.controller: Controller | None = None
        self.pool: EvaluatorPool | None = None
        self._thread = threading.Thread(target=self._run, name="bir-bench-control", daemon=True)

    @property
    def server(self) -> ControlServer:
        """The started control server.

        Raises:
            RuntimeError: not started yet.
        """
        if self._server is None:
            raise RuntimeError("the bench server is not started")
        return self._server

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                async with ServiceClient("", "") as service, EvaluatorPool() as pool:
                    self.pool = pool
                    self.controller = Controller(
                        queue=self.queue,
                        wrapped=self.wrapped,
                        pool=pool,
                        service=service,
                        # No service: the recorder keeps nothing (the bench's runs are armed, never missed).
                        recorder=Recorder(None, service_configured=False),
                        reports=_NoReports(),
                        switches=lambda: Switches(off=False, replay=True, allow=None),
                        delivery_live=lambda: False,
                    )
                    server = ControlServer(
                        handler=self.controller, queue=self.queue, wrapped=self.wrapped, replay_enabled=True
                    )
                    self._server = server
                    await server.start()
                    try:
                        self._ready.set()
                        await self._stop.wait()
                    finally:
                        await server.stop()
                        await self.controller.close()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                raise

        try:
            asyncio.run(serve())
        except BaseException as exc:  # noqa: BLE001 - reported by start() to the bench's thread
            self._error = self._error or exc

    def start(self) -> str:
        """Start the server; its URL.

        Raises:
            PinMeasureError: the server or its pool did not start.
        """
        self._thread.start()
        if (
            not self._ready.wait(START_TIMEOUT_S)
            or self._server is None
            or self._server.url is None
            or self._error is not None
        ):
            raise PinMeasureError(f"the control server did not start: {self._error!r}")
        return self._server.url

    def call(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``work()`` on the server's loop and wait for its result.

        Raises:
            PinMeasureError: the server is not running.
        """
        if self._loop is None:
            raise PinMeasureError("the control server is not running")
        return asyncio.run_coroutine_threadsafe(work(), self._loop).result(CALL_TIMEOUT_S)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_S)

    def arm(self, body: PinBody, session_id: str, cwd: Path) -> dict[str, Any]:
        """Arm a fresh steer plan for ``session_id`` (see the module's doc); the PreToolUse hook input of
        the model's call of its next step.

        Raises:
            PinMeasureError: the server is not running.
        """
        tool, arguments = model_call(body)

        async def arm() -> None:
            controller, pool = self.controller, self.pool
            if controller is None or pool is None:
                raise PinMeasureError("the control server is not running")
            # A proxy heard from now: the §7.1 merge adds a call id only for a served wrapped server.
            self.queue.register(BENCH_SERVER, BENCH_PROXY_ID)
            plan = ScenarioReplayPlan(_scenario(body), "steer", _resolved(PARAMS), pool)
            await plan.ready()
            if body == "reads_24kb":
                await plan.tool_input_for_current_step()
                await plan.apply_output(earlier_output())
            run = Run(
                run_id=f"run_{uuid.uuid4().hex}",
                session_id=session_id,
                prompt="bench: pin a step",
                started=time.monotonic(),
                mark=None,
                transcript_path=None,
                permission_mode="default",
                phase="running",
                plan=plan,
                steer=SteerState(),
            )
            controller.sessions.touch(session_id).run = run

        self.call(arm)
        return pre_tool_body(session_id, cwd, tool, arguments, tool_use_id=f"toolu_{uuid.uuid4().hex[:20]}")


def pre_tool_body(
    session_id: str,
    cwd: Path,
    tool: str = "Bash",
    tool_input: Mapping[str, Any] | None = None,
    *,
    tool_use_id: str = "toolu_bench",
) -> dict[str, Any]:
    """A PreToolUse hook input as Claude Code sends it (see the samples); a ``Bash ls`` call by default."""
    return {
        "session_id": session_id,
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": dict(tool_input) if tool_input is not None else {"command": "ls", "description": "list files"},
        "tool_use_id": tool_use_id,
    }


def pinned_input(answer: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pinned arguments of a PreToolUse answer that allowed with ``updatedInput``; None otherwise."""
    decision = answer.get("hookSpecificOutput")
    if not isinstance(decision, dict) or decision.get("permissionDecision") != "allow":
        return None
    updated = decision.get("updatedInput")
    return updated if isinstance(updated, dict) else None


def time_pins(
    url: str,
    token: str,
    arm: Callable[[], dict[str, Any]],
    check: Callable[[dict[str, Any]], str | None],
    *,
    calls: int,
    warmup: int,
) -> list[int]:
    """``warmup + calls`` times: ``arm()`` (untimed) for the hook input, then POST it to ``/tool/pre`` over
    one kept-alive connection (timed); ``check`` says what is wrong with an answer (None: it pinned).
    One duration (ns) per timed call.

    Raises:
        PinMeasureError: an answer was not 200, or ``check`` found it did not pin the call.
    """
    samples: list[int] = []
    clock = time.perf_counter_ns
    with httpx.Client(base_url=url, trust_env=False, timeout=CALL_TIMEOUT_S) as client:
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        for i in range(warmup + calls):
            body = arm()
            data = json.dumps(body).encode()
            started = clock()
            response = client.post(PRE_TOOL_ROUTE, content=data, headers=headers)
            elapsed = clock() - started
            if response.status_code != 200:
                raise PinMeasureError(f"{PRE_TOOL_ROUTE} answered {response.status_code}: {response.text[:200]!r}")
            wrong = check(response.json())
            if wrong is not None:
                raise PinMeasureError(f"the armed step was not pinned: {wrong}")
            if i >= warmup:
                samples.append(elapsed)
    return samples
