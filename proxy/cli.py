"""``bir-proxy [--server-name NAME] [--project DIR] [--no-control] -- <upstream command…>``.

A thin layer (``main`` → parse → run): it starts the upstream, opens our stdio and hands both to
``bir.proxy.session``. Anything that goes wrong before the relay starts is one line on stderr and
an exit status, never a traceback: the host sees a server that exited, as it would without us.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence

import anyio

from bir.core import config
from bir.core.exits import EXIT_SPAWN_FAILED, EXIT_USAGE
from bir.core.log import log_event
from bir.proxy.control_client import project_dir
from bir.proxy.host_stdio import open_host_stdio
from bir.proxy.session import ProxyOptions, default_server_name, run_session
from bir.proxy.upstream import Upstream, UpstreamSpawnError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bir-proxy",
        description="Relay a stdio MCP server for a host, and run bir's direct steps on it.",
        usage="bir-proxy [--server-name NAME] [--project DIR] [--no-control] -- <upstream command…>",
    )
    parser.add_argument("--server-name", help="the server's key (default: BIR_SERVER_NAME, else from the command)")
    parser.add_argument("--project", help="project whose control server to use (default: CLAUDE_PROJECT_DIR or .)")
    parser.add_argument("--no-control", action="store_true", help="a plain relay: never look for a control server")
    return parser


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        return args[:cut], args[cut + 1 :]
    return args, []


async def _run(command: list[str], options: ProxyOptions) -> int:
    try:
        upstream = await Upstream.spawn(command)
    except UpstreamSpawnError as exc:
        log_event("proxy.upstream_spawn_failed", command=command[:8], error=str(exc))
        sys.stderr.write(f"bir-proxy: {exc}\n")
        return EXIT_SPAWN_FAILED
    host_in, host_out = await open_host_stdio()
    try:
        return await run_session(upstream, host_in, host_out, options)
    finally:
        with anyio.CancelScope(shield=True):
            await upstream.stop()
            await host_out.aclose()
            await host_in.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bir-proxy``; its exit status (the upstream's, once it has started)."""
    ours, command = _split(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    args = parser.parse_args(ours)
    if not command:
        parser.print_usage(sys.stderr)
        sys.stderr.write("bir-proxy: give the upstream command after --\n")
        return EXIT_USAGE
    # Lenient: a proxy stands between Claude Code and the user's own server, and a bad value of a variable
    # it does not use must not take that server away (it is logged; bir-hooks and bir refuse it).
    settings, bad = config.load_lenient()
    for name, exc in bad:
        log_event("proxy.config_error", variable=name, error=str(exc))
    server_name = args.server_name or settings.server_name or default_server_name(command)
    options = ProxyOptions(
        server_name=server_name,
        proxy_id=uuid.uuid4().hex,
        project=project_dir(args.project),
        control=not args.no_control,
    )
    log_event("proxy.started", server=server_name, project=str(options.project), control=options.control)
    try:
        return anyio.run(_run, command, options, backend="asyncio")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
