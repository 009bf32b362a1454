"""The service's two backends, for the tests that are about its contract (issue 18.1): the fake service
over real HTTP on loopback, and the local service in process over its ASGI transport, each behind the
real ``ServiceClient``.

A test sets up what it needs through the contract where it can (a miss creates a run; a hit issues a
ticket), and reads what the backend kept through ``Backend``'s few readers: the fake's lists, or the
local store. The requests the client sent are seen on both: the fake logs them itself, and the local
backend's transport keeps them as they cross it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import httpx
import pytest

from bir.core.service import ServiceClient
from bir.core.types import MatchAnswer
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import LOCAL_TOKEN, open_local_service
from bir.hooks.local.app import build_app
from bir.hooks.local.runtime import LocalService
from bir.hooks.local.store import TICKET_TTL_S
from tests.fakes.baseinsvc import FakeBaseIn, SeenRequest
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS

Name = Literal["fake", "local"]
NAMES: Final[tuple[Name, ...]] = ("fake", "local")
PROMPT: Final = "show the details of the riskiest device in {region}"
# The regions later prompts of the task ask about: each one a hit with its own ticket.
REGIONS: Final = ("us-east-1", "sa-east-1", "ap-southeast-2", "eu-central-1", "us-west-2", "ca-central-1")
# The fake service's route names, for the requests the local backend's transport sees.
_ROUTES: Final = (
    ("POST", re.compile(r"^/recordings/runs$"), "match"),
    ("GET", re.compile(r"^/recordings/runs/[^/]+$"), "run"),
    ("POST", re.compile(r"^/recordings/runs/[^/]+/steps$"), "steps"),
    ("POST", re.compile(r"^/recordings/runs/[^/]+/finish$"), "finish"),
    ("GET", re.compile(r"^/scenarios/[^/]+$"), "scenario"),
    ("POST", re.compile(r"^/scenarios/[^/]+/derive$"), "derive"),
    ("POST", re.compile(r"^/scenarios/[^/]+/executions$"), "executions"),
)


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


def _route(method: str, path: str) -> str:
    return next((name for m, pattern, name in _ROUTES if m == method and pattern.match(path)), "other")


class SeeingTransport(httpx.ASGITransport):
    """The local service's in-process transport, keeping every request as the fake service would have seen
    it (an ``ASGITransport`` still: the client trusts plain http in process only)."""

    def __init__(self, app: Any) -> None:
        super().__init__(app=app)
        self.seen: list[SeenRequest] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = request.url.path
        self.seen.append(SeenRequest(_route(request.method, path), request.method, path, dict(request.headers), body))
        return await super().handle_async_request(request)


@dataclass(frozen=True)
class Booked:
    """One report the backend booked into a ledger (a costless one is not booked)."""

    ticket: str
    outcome: str
    measured: bool
    ledger: Literal["baseline", "savings"]


@dataclass
class Backend:
    name: Name
    client: ServiceClient
    token: str
    fake: FakeBaseIn | None = None
    local: LocalService | None = None
    transport: SeeingTransport | None = None
    _hits: Iterator[int] = field(default_factory=itertools.count)
    _runs: Iterator[int] = field(default_factory=itertools.count)
    _recorded: str | None = None

    # --- set-up, through the contract where it can be -------------------------------------------------

    async def new_run(self, run_id: str) -> None:
        """A miss: the backend keeps ``run_id``, with no steps yet."""
        assert await self.client.match(run_id, f"a prompt of its own for {run_id}", {"cwd": "/p"}) is None

    async def ready_scenario(self) -> str:
        """A ready scenario's id: the fake's packaged one, or one the local service calculated from a run."""
        if self.fake is not None:
            return self.fake.add_scenario(json.loads((SCENARIOS / "fleet-direct.json").read_text()))
        if self._recorded is None:
            self._recorded = await self._record()
        return self._recorded

    @property
    def source_run(self) -> str:
        """The run the ready scenario was calculated from (the fake's is made up with its match)."""
        return "run_src" if self.fake is not None else "run_rec"

    async def hit(self, run_id: str) -> MatchAnswer:
        """A prompt of the ready scenario's task, another value than the recorded one, sent as ``run_id``."""
        scenario_id = await self.ready_scenario()
        prompt = PROMPT.format(region=REGIONS[next(self._hits) % len(REGIONS)])
        if self.fake is not None:
            self.fake.add_match(prompt, self.fake.scenarios[scenario_id], run_id=self.source_run, similarity=0.94)
        answer = await self.client.match(run_id, prompt, {"cwd": "/p"})
        assert answer is not None
        assert answer.matched is not None
        return answer

    async def ticket(self) -> tuple[str, str]:
        """A ready scenario and a fresh execution ticket for it, from a hit."""
        answer = await self.hit(f"run_hit_{next(self._runs)}")
        assert answer.matched is not None
        assert answer.matched.scenario_id is not None
        assert answer.matched.execution_ticket is not None
        return answer.matched.scenario_id, answer.matched.execution_ticket

    def has_run(self, run_id: str) -> bool:
        if self.fake is not None:
            return run_id in self.fake.runs
        assert self.local is not None
        return self.local.store.run(run_id) is not None

    def expire_ticket(self, ticket: str) -> None:
        """Let ``ticket``'s time run out (the local store dates it back past its lifetime)."""
        if self.fake is not None:
            self.fake.expire_ticket(ticket)
            return
        assert self.local is not None
        with self.local.store.raw() as conn:
            conn.execute("UPDATE tickets SET issued_at = issued_at - ? WHERE ticket = ?", (TICKET_TTL_S + 60, ticket))

    async def _record(self) -> str:
        assert self.local is not None
        assert await self.client.match("run_rec", PROMPT.format(region="eu-west-1"), {"cwd": "/p"}) is None
        rows = list_devices_in("eu-west-1")
        top = max(rows, key=lambda r: r["risk"])
        steps = [
            ("mcp__fleet__list_devices", {"region": "eu-west-1"}, rows),
            ("mcp__fleet__get_device", {"id": top["id"]}, device_by_id(top["id"])),
        ]
        for i, (tool, tool_input, output) in enumerate(steps):
            body = {"stepIndex": i, "toolName": tool, "toolInput": tool_input, "toolOutput": mcp(output)}
            assert (await self.client.post_step("run_rec", body)).status == "recorded"
        assert (await self.client.finish_run("run_rec", {"output": "done", "durationMs": 900})).status == "finished"
        assert await self.local.idle()
        scenario = self.local.store.scenario_of_run("run_rec")
        assert scenario is not None
        assert scenario.state == "ready", scenario.reason
        return scenario.id

    # --- what the backend kept ------------------------------------------------------------------------

    @property
    def requests(self) -> list[SeenRequest]:
        """Every request the client sent, in order."""
        if self.fake is not None:
            return list(self.fake.requests)
        assert self.transport is not None
        return list(self.transport.seen)

    def requests_to(self, route: str) -> list[SeenRequest]:
        return [r for r in self.requests if r.route == route]

    def steps_of(self, run_id: str) -> list[dict[str, Any]]:
        """The step bodies kept for ``run_id``, in ``stepIndex`` order."""
        if self.fake is not None:
            return self.fake.steps_of(run_id)
        assert self.local is not None
        return [s.body for s in self.local.store.steps(run_id)]

    def finish_of(self, run_id: str) -> dict[str, Any] | None:
        """The finish body kept for ``run_id``; None while it has none."""
        if self.fake is not None:
            return self.fake.finished.get(run_id)
        assert self.local is not None
        run = self.local.store.run(run_id)
        return None if run is None else run.finish

    def booked(self) -> list[Booked]:
        """The reports booked into the baseline or the savings ledger, in booking order."""
        if self.fake is not None:
            baseline = [Booked(r.id, r.outcome, r.measured, "baseline") for r in self.fake.baseline]
            return baseline + [Booked(r.id, r.outcome, r.measured, "savings") for r in self.fake.ledger]
        assert self.local is not None
        return [
            Booked(e["ticket"], e["outcome"], e["measured"], e["ledger"])
            for e in self.local.store.executions()
            if e["ledger"] in ("baseline", "savings")
        ]

    def booked_tickets(self) -> list[str]:
        return [b.ticket for b in self.booked()]


@contextlib.asynccontextmanager
async def serving(name: Name, home: Path, pool: Any, *, timeout_s: float = 5.0) -> AsyncIterator[Backend]:
    """The backend called ``name``, a ``ServiceClient`` on it, for the block (the local store under ``home``)."""
    async with contextlib.AsyncExitStack() as stack:
        if name == "fake":
            fake = await stack.enter_async_context(running_fake_service())
            client = await stack.enter_async_context(ServiceClient(fake.url, fake.token, timeout_s=timeout_s))
            yield Backend("fake", client, fake.token, fake=fake)
            return
        local = await stack.enter_async_context(open_local_service(home, project="/p", pool=pool))
        transport = SeeingTransport(build_app(local.service))
        client = await stack.enter_async_context(
            ServiceClient(local.base_url, LOCAL_TOKEN, transport=transport, timeout_s=timeout_s)
        )
        yield Backend("local", client, LOCAL_TOKEN, local=local.service, transport=transport)


# The fixtures (``tests/conftest.py`` takes them in): one evaluator pool per module, whose
# ``anyio_backend`` is module-scoped too, and a test that asks for ``backend`` runs once per backend.


@pytest.fixture(scope="module")
async def pool(anyio_backend: str) -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=1) as running:
        yield running


@pytest.fixture(params=NAMES)
async def backend(request: pytest.FixtureRequest, tmp_path: Path, pool: EvaluatorPool) -> AsyncIterator[Backend]:
    async with serving(request.param, tmp_path, pool) as running:
        yield running
