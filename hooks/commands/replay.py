"""``bir replay``: run a scenario's plan through the control server and the proxies (spec §12.1), or set
this project's replay switches (``bir replay status|on|off|allow``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from bir.core import config
from bir.core.exits import EXIT_USAGE
from bir.core.log import log_to_file, logs_dir
from bir.hooks.commands import switches
from bir.hooks.commands.result import (
    REPLAY_EXIT_CODES,
    CommandError,
    CommandResult,
    Subparsers,
    add_command,
    log_for_later,
    print_result,
    project_flag,
)
from bir.hooks.replay.command import ReplayUsageError, main_args, run_replay
from bir.hooks.replay.host import HostSessionError
from bir.hooks.replay.report import render_json, render_text

EXAMPLES = (
    'bir replay --scenario examples/scenarios/fleet-direct.json --prompt "find the riskiest device in eu-west-1" '
    "--param region=eu-west-1 --wrap fleet='python -m bir.examples.fleet_server'",
    'bir replay --scenario scn_123 --prompt "…" --dry',
    "bir replay status",
    "bir replay on",
    "bir replay allow fleet,github",
    "bir replay allow all",
)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir replay``."""
    rp = add_command(
        sub,
        "replay",
        "run a scenario's plan through the control server and the proxies, or set this project's switches",
        EXAMPLES,
        REPLAY_EXIT_CODES,
    )
    rp.add_argument(
        "switch", nargs="?", choices=("status", "on", "off", "allow"), help="this project's replay switches instead"
    )
    rp.add_argument("servers", nargs="?", help="with allow: server keys separated by commas, or `all`")
    rp.add_argument("--scenario", help="a scenario file, or a scn_ id on the service")
    rp.add_argument("--prompt", help="the request the scenario is replayed for")
    rp.add_argument("--param", action="append", metavar="NAME=VALUE", help="a parameter value (wins over derivation)")
    rp.add_argument(
        "--wrap", action="append", metavar="NAME=COMMAND", help="with no control server: wrap this stdio MCP server"
    )
    rp.add_argument("--dry", action="store_true", help="derive and plan only: run no step")
    rp.add_argument("--json", action="store_true", help="print one JSON document and nothing else on stdout")
    rp.add_argument("--verbose", action="store_true", help="log lines on stderr instead of <BIR_HOME>/logs/replay.log")
    project_flag(rp)
    rp.set_defaults(run=run, usage_error=rp.error)


def _switch(args: argparse.Namespace) -> CommandResult:
    if args.switch == "status":
        return switches.replay_status(args.project)
    if args.switch in ("on", "off"):
        return switches.replay_switch(args.project, args.switch == "on")
    if not args.servers:
        raise CommandError("say which servers: bir replay allow fleet,github  (or: bir replay allow all)", EXIT_USAGE)
    return switches.replay_allow(args.project, args.servers)


def run(args: argparse.Namespace) -> int:
    """Run ``bir replay``; answer its exit status (``REPLAY_EXIT_CODES``)."""
    if args.switch:
        log_for_later()
        try:
            return print_result(_switch(args), args.json, sys.stdout)
        except CommandError as exc:
            sys.stderr.write(f"bir replay {args.switch}: {exc}\n")
            return exc.exit_code
    if not (args.scenario and args.prompt):
        # argparse's own refusal (usage, then the reason; exit 2), as for any other bad command line.
        args.usage_error("bir replay needs --scenario and --prompt (or one of: status, on, off, allow)")
    return run_plan(args)


def run_plan(args: argparse.Namespace) -> int:
    """Run a scenario's plan as ``args`` asks (``bir replay --scenario``, ``bir scenario replay``)."""
    try:
        replay_args = main_args(args)
    except ReplayUsageError as exc:
        sys.stderr.write(f"bir replay: {exc}\n")
        return EXIT_USAGE
    child_log: Path | None = None
    if not args.verbose:
        try:
            child_log = log_to_file(logs_dir(config.home()) / "replay.log")
        except OSError as exc:
            sys.stderr.write(f"bir replay: cannot open the log under {logs_dir(config.home())}: {exc}\n")
            return EXIT_USAGE

    def progress(text: str) -> None:
        sys.stderr.write(f"bir replay: {text}\n")

    try:
        report = asyncio.run(run_replay(replay_args, progress=progress, child_log=child_log))
    except (ReplayUsageError, HostSessionError, config.ConfigError) as exc:
        sys.stderr.write(f"bir replay: {exc}\n")
        if child_log is not None:
            sys.stderr.write(f"bir replay: details in {child_log}\n")
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(json.dumps(render_json(report), ensure_ascii=False, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render_text(report) + "\n")
    return report.exit_code
