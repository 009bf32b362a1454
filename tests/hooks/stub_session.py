"""A session handler for tests of the transport: each part is set by the test, the rest answers as no session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from bir.hooks import api
from bir.hooks.server.routes import NoSession, ReceivedStep

Runner = Callable[[api.ScenarioRunRequest], Awaitable[api.ScenarioRunAnswer]]
StepListener = Callable[[ReceivedStep], Awaitable[None]]


class Hooks(Protocol):
    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer: ...

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer: ...


@dataclass
class StubSession(NoSession):
    """``SessionHandler`` made of the parts a test gives it."""

    hooks: Hooks | None = None
    runner: Runner | None = None
    steps: StepListener | None = None

    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        return await (super().handle if self.hooks is None else self.hooks.handle)(event, hook, deadline)

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        return (super().overdue if self.hooks is None else self.hooks.overdue)(event, hook)

    async def run_scenario(self, request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        return await (super().run_scenario if self.runner is None else self.runner)(request)

    async def on_step(self, received: ReceivedStep) -> None:
        if self.steps is not None:
            await self.steps(received)
