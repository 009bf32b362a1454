"""``bir-hooks``: the one composition root of a project's control server and its live session.

``live_session`` builds the parts in order (the proxies' work queue, the hello book, the service
client, the evaluator pool, the outbox, the recorder, the controller) and then the server with the
controller as its handler, so nothing is attached after construction and the server never imports
the session. ``main`` is the console script: it takes the project's lock, publishes the discovery
file, serves until SIGTERM or SIGINT, or until nothing has used it for ``BIR_CONTROL_IDLE_MS`` (no hook,
no proxy polling, no ``bir`` server: the next hook revives it), and removes the file on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bir.core import config, installed
from bir.core.delivery import sweep, tmp_dir
from bir.core.home_files import open_private, private_dir
from bir.core.log import log_event, log_to_file, logs_dir
from bir.core.paths import project_key, server_lock
from bir.core.service import ServiceClient
from bir.core.stall import CLEAR_EVERY_S, clear_stalled
from bir.evaluator import EvaluatorPool
from bir.hooks.discovery import read_discovery, remove_discovery, write_discovery
from bir.hooks.local import local_client, wants_local
from bir.hooks.local.store import StoreError
from bir.hooks.server.control import ControlServer
from bir.hooks.server.hellos import HelloBook
from bir.hooks.server.work_queue import ProxyWorkQueue
from bir.hooks.session.controller import Controller
from bir.hooks.session.outbox import Outbox, outbox_dir
from bir.hooks.session.recorder import Recorder
from bir.hooks.session.switches import SwitchReader, installed_proxies, read_switches
from bir.hooks.wiring import wrap_approved

# Bundle files (a diverging Bash's results, §8) live an hour; the server looks this often, so none
# outlives it by more than this, whether or not another bundle is written.
SWEEP_EVERY_S: Final = 300.0


async def _sweep_bundles(home: Path, every_s: float) -> None:
    while True:
        removed = sweep(tmp_dir(home))
        if removed:
            log_event("control.swept", files=removed)
        await asyncio.sleep(every_s)


# How often an idle server looks at its clock, at most (it looks sooner when the idle time is due sooner).
IDLE_CHECK_S: Final = 5.0


@dataclass(frozen=True)
class LiveSession:
    """A started control server and the controller that answers its hooks."""

    server: ControlServer
    controller: Controller


@contextlib.asynccontextmanager
async def live_session(
    project: Path,
    *,
    service: ServiceClient | None = None,
    switches: SwitchReader | None = None,
    port: int = 0,
    sweep_every_s: float = SWEEP_EVERY_S,
    settings: config.Settings | None = None,
) -> AsyncIterator[LiveSession]:
    """A control server for ``project`` with its live session, started on loopback ``port`` while the
    context is open; on the way out every open run is booked, the outbox flushes, the pool stops, and
    the server stops last. Every part is given ``settings`` (read now when None).

    Raises:
        OSError: the port cannot be bound.
        RuntimeError: the server did not start.
        ConfigError: ``settings`` is None and a ``BIR_*`` variable holds an unusable value.
    """
    settings = settings if settings is not None else config.load()
    async with contextlib.AsyncExitStack() as stack:
        pool = EvaluatorPool(settings=settings)
        kind = "given"
        if service is None:
            kind = "local" if wants_local(settings) else "remote"
            service = await stack.enter_async_context(_service_for(project, pool, kind, settings))
        outbox = Outbox(outbox_dir(project, settings.home), service)
        queue = ProxyWorkQueue()
        hellos = HelloBook()
        wrapped: set[str] = set()
        controller = Controller(
            queue=queue,
            wrapped=wrapped,
            pool=pool,
            service=service,
            recorder=Recorder(outbox, lambda: service.configured),
            reports=outbox,
            switches=switches or read_switches(project, settings),
            delivery_live=hellos.delivery_tool_live,
            wait_for_delivery=hellos.wait_for_delivery_tool,
            expected_wrapped=lambda: installed_proxies(project),
            wrap_approved=lambda: asyncio.to_thread(wrap_approved, project),
            settings=settings,
        )
        controller.switches()
        server = ControlServer(handler=controller, queue=queue, hellos=hellos, wrapped=wrapped, settings=settings)
        # Started first, stopped last: nothing knows its address until the caller publishes it.
        stack.push_async_callback(server.stop)
        await server.start(port=port)
        log_event("control.service", service=kind)
        await stack.enter_async_context(pool)
        await stack.enter_async_context(outbox.running())
        stack.push_async_callback(outbox.flush, 2.0)
        stack.push_async_callback(controller.close)
        sweeper = asyncio.create_task(_sweep_bundles(settings.home, sweep_every_s), name="bir-bundle-sweep")
        stack.callback(sweeper.cancel)
        yield LiveSession(server, controller)


def _service_for(
    project: Path, pool: EvaluatorPool, kind: str, settings: config.Settings
) -> contextlib.AbstractAsyncContextManager[ServiceClient]:
    """The remote service when one is configured (or ``BIR_SERVICE=remote``), else the local one on this
    machine, whose self-checks share the session's evaluator pool (it is started before any run finishes)."""
    if kind == "local":
        return local_client(project=project, pool=pool, settings=settings)
    return ServiceClient(settings=settings)


class _UvicornToEvents(logging.Handler):
    """uvicorn's own log records as JSON lines, so stderr stays one format."""

    def emit(self, record: logging.LogRecord) -> None:
        log_event("control.uvicorn", level=record.levelname.lower(), message=record.getMessage())


def _route_uvicorn_logs() -> None:
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [_UvicornToEvents(level=logging.WARNING)]
        logger.propagate = False


def take_server_lock(project: Path, home: Path) -> int | None:
    """Take the project's server lock (``<home>/control/<key>.lock``, ``flock``) and return its fd,
    held for the process's life; None when another live process holds it. A dead holder's lock is
    free: the kernel drops it with the process.

    Raises:
        OSError: the lock file cannot be created.
    """
    path = server_lock(home, project)
    private_dir(home, "control")
    fd = open_private(path, "update")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def _serve(project: Path, port: int, settings: config.Settings, *, quiet_if_running: bool = False) -> int:
    lock = take_server_lock(project, settings.home)
    existing = read_discovery(project)
    if lock is None or (existing is not None and existing.pid != os.getpid()):
        if lock is not None:
            os.close(lock)
        if quiet_if_running:
            return 0
        holder = f" (pid {existing.pid})" if existing is not None else ""
        sys.stderr.write(f"bir-hooks: a control server is already running for {project}{holder}\n")
        return 1
    try:
        return await _serve_locked(project, port, settings)
    finally:
        os.close(lock)


async def until_stopped_or_idle(
    stop: asyncio.Event,
    server: ControlServer,
    idle_s: float | None,
    project: Path | None = None,
    home: Path | None = None,
) -> bool:
    """Wait for ``stop``, or for ``server`` to go unused for ``idle_s`` (None: never), counted from now at the
    earliest (the server is published now; nobody could use it before); True when it went idle. Meanwhile
    any note a hook left that this server of ``project`` (under ``home``, else ``BIR_HOME``) did not answer
    is cleared: it runs again."""
    since = time.monotonic()
    home, pid = home if home is not None else config.home(), os.getpid()

    def idle() -> float:
        return min(server.idle_s(), time.monotonic() - since)

    while True:
        if project is not None and clear_stalled(home, project, pid):
            log_event("control.stall_cleared", project=str(project))
        wait = CLEAR_EVERY_S if idle_s is None else min(IDLE_CHECK_S, CLEAR_EVERY_S, max(0.05, idle_s - idle()))
        try:
            await asyncio.wait_for(stop.wait(), wait)
            return False
        except TimeoutError:
            pass
        if idle_s is not None and idle() >= idle_s:
            return True


async def _serve_locked(project: Path, port: int, settings: config.Settings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    idle_ms = settings.control_idle_ms
    try:
        async with live_session(project, port=port, settings=settings) as live:
            try:
                path = write_discovery(live.server.discovery(project))
                log_event("control.published", path=str(path), project=str(project), url=live.server.url)
                idle_s = idle_ms / 1000 if idle_ms else None
                if await until_stopped_or_idle(stop, live.server, idle_s, project, settings.home):
                    log_event("control.idle_exit", project=str(project), idle_ms=idle_ms)
            finally:
                remove_discovery(project, pid=os.getpid())
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


def _revive(argv: Sequence[str]) -> int:
    """``bir-hooks revive --project DIR``: what a hook starts, detached, for an installed project with
    no live server. Exits 0 at once when the project is not installed, is marked down, or already has a
    server; else serves, logging to ``<BIR_HOME>/logs/<key>.log``."""
    parser = argparse.ArgumentParser(prog="bir-hooks revive", description="start the project's server if due")
    parser.add_argument("--project", required=True, help="project directory")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: any free port)")
    args = parser.parse_args(argv)
    project = Path(args.project).resolve()
    home = config.home()
    switches = installed.project(project, home)
    if switches is None or switches.down or read_discovery(project) is not None:
        return 0
    log_to_file(logs_dir(home) / f"{project_key(project)}.log")
    log_event("control.revive", project=str(project), pid=os.getpid())
    _route_uvicorn_logs()
    try:
        settings = config.load()
        return asyncio.run(_serve(project, args.port, settings, quiet_if_running=True))
    except (OSError, RuntimeError, ValueError, StoreError) as exc:
        log_event("control.revive_failed", project=str(project), error=f"{type(exc).__name__}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``bir-hooks [--project DIR] [--port N]``: serve the control server for a project until SIGTERM or
    SIGINT; ``bir-hooks revive --project DIR``: the same, detached, only when an installed project needs it."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["revive"]:
        return _revive(args_list[1:])
    parser = argparse.ArgumentParser(prog="bir-hooks", description="bir's control server for one project.")
    parser.add_argument("--project", default=".", help="project directory (default: the working directory)")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: any free port)")
    parser.add_argument(
        "--verbose", action="store_true", help="log lines on stderr instead of <BIR_HOME>/logs/<project key>.log"
    )
    args = parser.parse_args(args_list)
    project = Path(args.project).resolve()
    try:
        settings = config.load()
    except config.ConfigError as exc:
        sys.stderr.write(f"bir-hooks: {exc}\n")
        return 1
    if not args.verbose:
        # A server logs to its project's file (`bir logs` shows it), never to a terminal it shares.
        try:
            log_to_file(logs_dir(settings.home) / f"{project_key(project)}.log")
        except OSError as exc:
            sys.stderr.write(f"bir-hooks: cannot open the log under {logs_dir(settings.home)}: {exc}\n")
            return 1
    _route_uvicorn_logs()
    try:
        return asyncio.run(_serve(project, args.port, settings))
    except (OSError, RuntimeError, ValueError, StoreError) as exc:
        # ConfigError is a ValueError, a refused home a HomeError and a refused local store a StoreError:
        # one line naming the file or the variable, never a traceback.
        sys.stderr.write(f"bir-hooks: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
