"""The live-session side of a control server: the controller, its evaluator pool, its service sink.

``bir-hooks`` (and tests that start a server in-process) attach one with ``live_controller``; it
installs the controller as the server's hook handler, scenario runner and step listener, and on
the way out books every open run and stops the pool.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from bir.core import config, installed
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.hooks.commands.install import BIR_SERVER
from bir.hooks.server.control import ControlServer
from bir.hooks.session.controller import Controller, Switches
from bir.hooks.session.outbox import Outbox
from bir.hooks.session.recorder import Recorder

OFF_FILE_NAME = "off"


def read_switches(server: ControlServer, project: Path) -> Callable[[], Switches]:
    """The project's switches, read at each use so a flip reaches a running server without a restart.

    Replay is on only where ``bir install --replay`` stored it on (D14) and ``BIR_REPLAY`` is not ``0``;
    the allowlist is ``BIR_REPLAY_ALLOW_SERVERS``, else the project's stored one.
    """

    def read() -> Switches:
        off = bool(config.get_flag("BIR_OFF")) or (config.home() / OFF_FILE_NAME).exists()
        try:
            stored = installed.project(project)
        except installed.StoreError:
            stored = None
        replay = config.get_flag("BIR_REPLAY") is not False and stored is not None and stored.replay
        # The proxies pace their polls by the same switch (§16.2).
        server.replay_enabled = replay
        allow = config.get_list("BIR_REPLAY_ALLOW_SERVERS")
        if allow is None and stored is not None and stored.allow is not None:
            allow = tuple(stored.allow)
        return Switches(off=off, replay=replay, allow=frozenset(allow) if allow is not None else None)

    return read


def installed_proxies(project: Path) -> frozenset[str]:
    """The servers ``bir install`` put behind ``bir-proxy`` for ``project`` (their proxies will register)."""
    try:
        stored = installed.project(project)
    except installed.StoreError:
        return frozenset()
    if stored is None:
        return frozenset()
    names = stored.install.get("localServers")
    if not isinstance(names, list):
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str) and n != BIR_SERVER)


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
        outbox = await stack.enter_async_context(Outbox.for_project(project, service).running())
        recorder = Recorder(outbox, service.configured)
        controller = Controller(
            queue=server.queue,
            wrapped=server.wrapped,
            pool=pool,
            service=service,
            recorder=recorder,
            reports=outbox,
            switches=switches or read_switches(server, project),
            delivery_live=server.delivery_tool_live,
            wait_for_delivery=server.wait_for_delivery_tool,
            expected_wrapped=lambda: installed_proxies(project),
        )
        controller.switches()
        server.hook_handler = controller
        server.scenario_runner = controller.run_scenario
        server.on_step = controller.on_step
        configured = service.configured
        server.service_cooling = lambda: controller.health.remaining(time.monotonic()) if configured else None
        try:
            yield controller
        finally:
            server.service_cooling = None
            server.hook_handler = None
            server.scenario_runner = None
            server.on_step = None
            await controller.close()
            await outbox.flush(2.0)
