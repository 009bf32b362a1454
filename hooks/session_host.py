"""The live-session side of a control server: the controller, its evaluator pool, its service sink.

``bir-hooks`` (and tests that start a server in-process) attach one with ``live_controller``; it
installs the controller as the server's hook handler, scenario runner and step listener, and on
the way out books every open run and stops the pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from bir.core import config
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.hooks.controller import Controller, Switches
from bir.hooks.server import ControlServer
from bir.hooks.service_sink import ServiceSink

OFF_FILE_NAME = "off"


def read_switches(server: ControlServer) -> Callable[[], Switches]:
    """The project's switches, read at each use so a flip reaches a running server without a restart."""

    def read() -> Switches:
        off = bool(config.get_flag("BIR_OFF")) or (config.home() / OFF_FILE_NAME).exists()
        allow = config.get_list("BIR_REPLAY_ALLOW_SERVERS")
        return Switches(off=off, replay=server.replay_enabled, allow=frozenset(allow) if allow is not None else None)

    return read


@contextlib.asynccontextmanager
async def live_controller(
    server: ControlServer,
    project: Path,
    *,
    service: ServiceClient | None = None,
    switches: Callable[[], Switches] | None = None,
) -> AsyncIterator[Controller]:
    """Attach a controller to ``server`` for ``project`` while the context is open."""
    async with contextlib.AsyncExitStack() as stack:
        if service is None:
            service = await stack.enter_async_context(ServiceClient())
        pool = await stack.enter_async_context(EvaluatorPool())
        sink = ServiceSink(service)
        controller = Controller(
            queue=server.queue,
            wrapped=server.wrapped,
            pool=pool,
            service=service,
            recorder=sink,
            reports=sink,
            switches=switches or read_switches(server),
            delivery_live=server.delivery_tool_live,
        )
        server.hook_handler = controller
        server.scenario_runner = controller.run_scenario
        server.on_step = controller.on_step
        try:
            yield controller
        finally:
            server.hook_handler = None
            server.scenario_runner = None
            server.on_step = None
            await controller.close()
            await sink.flush(5.0)
