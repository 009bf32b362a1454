"""One ``bir-proxy`` run: the upstream, the relay, the work loop and the signals, wired together.

The host session must never fail because of the proxy. So the relay runs whatever happens to the
control server; the upstream's exit is reported to the host as errors on its pending requests and
the proxy then exits with the upstream's code; the host closing stdin stops the upstream within a
bounded time; and SIGINT/SIGTERM are passed on to the upstream, which is then stopped the same way.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup

from bir.core.log import log_event
from bir.proxy.relay import HostGone, Relay
from bir.proxy.upstream import Upstream, exit_code
from bir.proxy.work_loop import Pace, WorkLoop

# After the upstream exits, how long its remaining output may take to drain (a grandchild that
# inherited its stdout could otherwise keep the pipe open forever).
DRAIN_S: Final = 2.0


@dataclass(frozen=True)
class ProxyOptions:
    server_name: str
    proxy_id: str
    project: Path
    pace: Pace | None = None
    control: bool = True


async def run_session(
    upstream: Upstream, host_in: ByteReceiveStream, host_out: ByteSendStream, options: ProxyOptions
) -> int:
    """Relay until the upstream exits; the exit status the proxy should end with."""
    work: WorkLoop | None = None
    relay = Relay(
        upstream_in=upstream.stdin,
        host_out=host_out,
        control_known=lambda: work is not None and work.known,
        on_step=lambda report: work.offer_step(report) if work is not None else None,
        server_name=options.server_name,
    )
    if options.control:
        work = WorkLoop(
            relay,
            server_name=options.server_name,
            proxy_id=options.proxy_id,
            project=options.project,
            pace=options.pace,
        )
    pumped = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_forward_signals, upstream, group)
        group.start_soon(_host_side, relay, host_in, upstream, work)
        group.start_soon(_unstick_after_exit, upstream, pumped)
        if work is not None:
            group.start_soon(work.run)
        try:
            await relay.pump_upstream(upstream.stdout)
        except HostGone:
            log_event("proxy.host_gone", server=options.server_name)
        pumped.set()
        returncode = await upstream.stop()
        log_event("proxy.upstream_exited", server=options.server_name, returncode=returncode)
        with contextlib.suppress(HostGone):
            await relay.fail_pending(f"upstream exited ({_describe(returncode)})")
        group.cancel_scope.cancel()
    return exit_code(returncode)


async def _host_side(relay: Relay, host_in: ByteReceiveStream, upstream: Upstream, work: WorkLoop | None) -> None:
    await relay.pump_host(host_in)
    # The host closed our stdin: MCP's shutdown. The control server hears it first (its status is then
    # true at once), then the upstream gets it, bounded.
    log_event("proxy.host_closed")
    if work is not None:
        await work.leave()
    await upstream.stop()


async def _unstick_after_exit(upstream: Upstream, pumped: anyio.Event) -> None:
    await upstream.wait_exited()
    with anyio.move_on_after(DRAIN_S):
        await pumped.wait()
    if not pumped.is_set():
        log_event("proxy.upstream_stdout_held", why="the upstream exited but its stdout stayed open")
        await upstream.close_stdout()


async def _forward_signals(upstream: Upstream, group: TaskGroup) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log_event("proxy.signal", signal=signal.Signals(signum).name, upstream_pid=upstream.pid)
            upstream.send_signal(signal.Signals(signum))
            group.start_soon(upstream.stop)


def _describe(returncode: int | None) -> str:
    if returncode is None:
        return "still running, abandoned"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


_LAUNCHERS: Final = frozenset({"npx", "node", "uvx", "uv", "bunx", "bun", "pnpm", "deno", "pipx", "run", "exec"})
_GENERIC_FILES: Final = frozenset({"index", "main", "server", "cli", "__main__", "dist", "build", "src", "bin", "lib"})


def default_server_name(argv: Sequence[str]) -> str:
    """A server key from the upstream command when none is given: the package or script it runs
    (``npx -y @scope/server-x@1`` → ``server-x``, ``uvx mcp-server-time`` → ``mcp-server-time``,
    ``node …/server-x/dist/index.js`` → ``server-x``)."""
    for arg in argv:
        if arg.startswith("-"):
            continue
        path = Path(arg)
        if path.name in _LAUNCHERS or path.name.startswith("python"):
            continue
        for part in (path.name, *(p.name for p in path.parents)):
            name = part.split("@")[1] if part.startswith("@") and part.count("@") > 1 else part.split("@")[0]
            name = Path(name).stem if "." in name else name
            if name and name not in _GENERIC_FILES:
                return name[:64]
    return "upstream"
