"""``bir replay``: run a scenario's plan through the control server and the proxies (spec §12.1), list the
packaged scenarios (``--list``), or set this project's replay switches (``bir replay status|on|off|allow``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Final

from bir.core import config
from bir.core.exits import EXIT_USAGE
from bir.core.log import log_event, log_to_file, logs_dir
from bir.hooks.commands import switches
from bir.hooks.commands.progress import Progress
from bir.hooks.commands.result import (
    REPLAY_EXIT_CODES,
    CommandError,
    CommandResult,
    Subparsers,
    add_command,
    print_result,
    project_flag,
    write_json,
)
from bir.hooks.replay import catalog
from bir.hooks.replay.command import ReplayUsageError, main_args, run_replay
from bir.hooks.replay.host import HostSessionError
from bir.hooks.replay.report import render_json, render_text

FLEET: Final = "python -m bir.examples.fleet_server"
EXAMPLES: Final = (
    'bir replay --scenario fleet-direct --prompt "find the riskiest device in eu-west-1" '
    f"--param region=eu-west-1 --wrap fleet='{FLEET}'",
    'bir replay --scenario fleet-mixed --prompt "compare the riskiest device with the thresholds" '
    "--param region=eu-west-1 --dry",
    "bir replay --list",
    "bir replay status",
    "bir replay on",
    "bir replay allow fleet",
    "bir replay allow all",
)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir replay``."""
    rp = add_command(
        sub,
        "replay",
        "run a scenario's plan through the control server and the proxies, list the packaged scenarios, or set "
        "this project's switches",
        EXAMPLES,
        REPLAY_EXIT_CODES,
    )
    rp.add_argument(
        "switch", nargs="?", choices=("status", "on", "off", "allow"), help="this project's replay switches instead"
    )
    rp.add_argument("servers", nargs="?", help="with allow: server keys separated by commas, or `all`")
    rp.add_argument("--scenario", help="a scenario file, a packaged scenario's name (--list), or a scn_ id")
    rp.add_argument("--prompt", help="the request the scenario is replayed for")
    rp.add_argument("--list", action="store_true", help="the packaged scenarios, and a command line for each")
    plan_flags(rp)
    project_flag(rp)
    rp.set_defaults(run=run, usage_error=rp.error)


def plan_flags(
    parser: argparse.ArgumentParser, dry_help: str = "derive and plan only: run no step, say where a run stops"
) -> None:
    """The options of a plan's run, shared by ``bir replay`` and ``bir scenario replay``."""
    parser.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="a parameter value (wins over derivation)"
    )
    parser.add_argument(
        "--wrap",
        action="append",
        metavar="NAME=COMMAND",
        help="run this stdio MCP server for the run, behind a bir-proxy of its own (always used when given)",
    )
    parser.add_argument("--dry", action="store_true", help=dry_help)
    parser.add_argument(
        "--partial",
        action="store_true",
        help="a plan that cannot finish here (a built-in step, a server no proxy serves): run the steps before "
        "that one and stop there",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document and nothing else")
    parser.add_argument(
        "--verbose", action="store_true", help="log lines on stderr instead of <BIR_HOME>/logs/replay.log"
    )


def _switch(args: argparse.Namespace, settings: config.Settings) -> CommandResult:
    if args.switch == "status":
        return switches.replay_status(args.project, settings)
    if args.switch in ("on", "off"):
        return switches.replay_switch(args.project, args.switch == "on", settings)
    if not args.servers:
        raise CommandError("say which servers: bir replay allow fleet,github  (or: bir replay allow all)", EXIT_USAGE)
    return switches.replay_allow(args.project, args.servers, settings)


def list_examples() -> CommandResult:
    """``bir replay --list``: the packaged scenarios, each with a command line that runs it on the demo fleet."""
    found = catalog.packaged()
    if not found:
        return CommandResult("No packaged scenario is installed with this bir.", {"scenarios": []})
    lines = ["Packaged scenarios (bir replay --scenario NAME):"]
    docs = []
    for example in found:
        steps = ", ".join(s.tool_name for s in example.scenario.steps)
        lines.append(f"  {example.name}: {example.scenario.intent}")
        lines.append(f"    {example.mode}, {len(example.scenario.steps)} steps: {steps}")
        if example.builtins:
            lines.append(
                f"    {', '.join(example.builtins)} run only inside a Claude Code session: here, --partial runs the "
                "steps before the first of them"
            )
        lines.append(f"    {example.command(sys.executable)}")
        docs.append(
            {
                "name": example.name,
                "id": example.scenario.id,
                "intent": example.scenario.intent,
                "mode": example.mode,
                "tools": [s.tool_name for s in example.scenario.steps],
                "builtins": list(example.builtins),
                "command": example.command(sys.executable),
            }
        )
    return CommandResult("\n".join(lines), {"scenarios": docs})


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir replay``; answer its exit status (``REPLAY_EXIT_CODES``).

    Raises:
        CommandError: a switch was refused, or the run could not start (the message says what to do next).
    """
    if args.switch:
        return print_result(_switch(args, settings), args.json, sys.stdout)
    if args.list:
        return print_result(list_examples(), args.json, sys.stdout)
    if not (args.scenario and args.prompt):
        # argparse's own refusal (usage, then the reason; exit 2), as for any other bad command line.
        args.usage_error("bir replay needs --scenario and --prompt (or --list, or one of: status, on, off, allow)")
    return run_plan(args, settings)


def run_plan(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run a scenario's plan as ``args`` asks (``bir replay --scenario``, ``bir scenario replay``).

    Raises:
        CommandError: the command line or the scenario cannot be used, or a ``--wrap`` server did not start.
    """
    try:
        replay_args = main_args(args)
    except ReplayUsageError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    child_log: Path | None = None
    if not args.verbose:
        try:
            child_log = log_to_file(logs_dir(settings.home) / "replay.log")
        except OSError as exc:
            raise CommandError(f"cannot open the log under {logs_dir(settings.home)}: {exc}", EXIT_USAGE) from None
    progress = Progress(enabled=None if not args.json else False, prefix="bir replay: ")
    try:
        with progress:
            report = asyncio.run(run_replay(replay_args, progress=progress, child_log=child_log, settings=settings))
    except ReplayUsageError as exc:
        log_event("replay.refused", error=str(exc))
        raise CommandError(str(exc), EXIT_USAGE) from None
    except HostSessionError as exc:
        log_event("replay.refused", error=str(exc))
        raise CommandError(str(exc), EXIT_USAGE, code="wrap_failed") from None
    if args.json:
        write_json(render_json(report), sys.stdout)
    else:
        sys.stdout.write(render_text(report) + "\n")
    return report.exit_code
