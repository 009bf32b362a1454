"""The ``bir`` command line: a thin layer over the subsystems (``main`` → parse → run → print).

The one composition root: it may import every package. Commands talk to people on stdout (or print
exactly one JSON document with ``--json``); the JSON log lines of this process, of the control server
it may start and of the proxies it spawns go to ``<BIR_HOME>/logs/`` unless ``--verbose`` sends them to
stderr. Every ``BIR_*`` value is checked before any command runs, so a bad one never costs a network call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bir import __version__
from bir.core import config
from bir.core.log import log_to_file, logs_dir
from bir.hooks.replay.report import EXIT_INTERRUPTED, EXIT_MISSING_TARGET, EXIT_OK, EXIT_STOPPED, EXIT_USAGE

EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    ok
  {EXIT_STOPPED}    the run stopped, was refused, or failed
  {EXIT_USAGE}    usage: a bad option, scenario or BIR_* value
  {EXIT_MISSING_TARGET}    a target parameter has no value (bir replay)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bir",
        description="Calculated replay for Claude Code.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"bir {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="measure bir's hot paths", epilog=EXIT_CODES)
    bench_sub = bench.add_subparsers(dest="bench_target", required=True)
    ev = bench_sub.add_parser(
        "eval", help="the evaluator pool against the in-process floor, or one scenario's bodies (--scenario)"
    )
    ev.add_argument("--quick", action="store_true", help="fewer iterations (about 20 s)")
    ev.add_argument("--json", action="store_true", help="print one JSON document")
    ev.add_argument(
        "--scenario", help="time this scenario's own bodies (a file or a scn_ id) and suggest BIR_LOGIC_TIMEOUT_MS"
    )
    ev.add_argument("--prompt", help="with --scenario: derive the parameters from this request (else the samples)")
    ev.add_argument(
        "--outputs", metavar="FILE", help="with --scenario: a JSON object, step index -> that step's output"
    )
    ev.add_argument("--run", metavar="RUN_ID", help="with --scenario: take the outputs from this source run")
    ev.add_argument("--calls", type=int, help="with --scenario: timed calls per body (default 200, 50 with --quick)")
    pn = bench_sub.add_parser("pin", help="what a pinned tool call costs: bir-hook beside bare command hooks")
    pn.add_argument("--quick", action="store_true", help="fewer iterations (about 10 s)")
    pn.add_argument("--json", action="store_true", help="print one JSON document")
    px = bench_sub.add_parser("proxy", help="what bir-proxy adds to a tools/call, and a direct step's round trip")
    px.add_argument("--quick", action="store_true", help="fewer iterations (about 30 s)")
    px.add_argument("--json", action="store_true", help="print one JSON document")

    rp = sub.add_parser(
        "replay",
        help="run a scenario's plan through the control server and the proxies, or set this project's switches",
        epilog='examples:\n  bir replay --scenario scn_123 --prompt "…" --dry\n  bir replay status\n'
        "  bir replay on\n  bir replay allow fleet,github\n  bir replay allow all\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    rp.add_argument("--project", default=".", help="the project directory (default: the working directory)")

    for name, helptext, replay_help in (
        ("install", "wire bir into a project's Claude Code hooks and MCP servers", "also turn replay on"),
        ("uninstall", "take bir out of a project, restoring what install changed", "only turn replay off"),
    ):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("--replay", action="store_true", help=replay_help)
        if name == "install":
            cmd.add_argument(
                "--mcp-hooks",
                action="store_true",
                help="with --replay: answer the tool events' hooks in the bir MCP server (mcp_tool hooks), "
                "no process per tool call",
            )
        cmd.add_argument("--project", default=".", help="the project directory (default: the working directory)")
        cmd.add_argument("--json", action="store_true", help="print one JSON document describing what changed")

    _add_ops_parsers(sub)

    logs = sub.add_parser(
        "logs",
        help="the project's control-server log, readable (JSON lines with --json)",
        epilog="example:\n  bir logs -f\n  bir logs -n 200 --json | jq .event",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    logs.add_argument("-n", "--lines", type=int, default=50, help="how many of the last lines (default: 50)")
    logs.add_argument("--json", action="store_true", help="the JSON lines as they are")
    logs.add_argument("--project", default=".", help="the project directory (default: the working directory)")

    from bir.hooks.commands.scenario import add_parsers as add_scenario_parsers

    add_scenario_parsers(sub)

    cfg = sub.add_parser("config", help="the BIR_* variables: value in effect, default, where from")
    cfg.add_argument("--markdown", action="store_true", help="print the README's table of variables instead")
    return parser


OPS_EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    ok
  {EXIT_STOPPED}    refused or failed (the message says what to do next); status, doctor: something is broken
  {EXIT_USAGE}    usage: a bad option or BIR_* value
"""
_OPS: Final = (
    ("status", "one screen: installed, replay, control server, proxies, the bir server, the service", "bir status"),
    ("doctor", "what is wrong here, replay first, and the command that fixes each thing", "bir doctor --json"),
    ("off", "take the whole runner out of the way: hooks answer {}, the bir server lists no tools", "bir off"),
    ("on", "undo `bir off`", "bir on"),
    ("up", "start this project's control server (and let hooks revive it again)", "bir up --project ~/src/app"),
    ("down", "stop this project's control server; nothing revives it until `bir up`", "bir down"),
    ("login", "sign in to the BaseIn service (stored 0600; BIR_AUTH_URL/BIR_TOKEN win)", "bir login --url URL"),
    ("logout", "forget the stored sign-in", "bir logout"),
)

_OPS_NAMES: Final = frozenset(name for name, _, _ in _OPS)


def _add_ops_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, helptext, example in _OPS:
        epilog = f"example:\n  {example}\n\n{OPS_EXIT_CODES}"
        cmd = sub.add_parser(name, help=helptext, description=helptext, epilog=epilog)
        cmd.formatter_class = argparse.RawDescriptionHelpFormatter
        if name in ("status", "doctor", "up", "down"):
            cmd.add_argument("--project", default=".", help="the project directory (default: the working directory)")
        if name == "login":
            cmd.add_argument("--url", help="the service's base URL (default: BIR_AUTH_URL, else the stored one)")
            cmd.add_argument("--token", help="the token (default: asked for without echo, or read from stdin)")
        cmd.add_argument("--json", action="store_true", help="print one JSON document")


def _install_command(args: argparse.Namespace) -> int:
    from bir.hooks.commands.install import InstallError, describe, find_executables, install, uninstall

    try:
        if args.command == "install":
            change = install(args.project, replay=args.replay, exes=find_executables(), mcp_hooks=args.mcp_hooks)
        else:
            change = uninstall(args.project, replay_only=args.replay)
    except InstallError as exc:
        sys.stderr.write(f"bir {args.command}: {exc}\n")
        return 1
    text = json.dumps(change.to_json(), indent=2) if args.json else describe(change)
    sys.stdout.write(text + "\n")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from bir.hooks.replay.command import ReplayUsageError, main_args, run_replay
    from bir.hooks.replay.host import HostSessionError
    from bir.hooks.replay.report import render_json, render_text

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


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bir``; answer its exit status (see ``EXIT_CODES``)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        config.validate_all()
        if args.command in _OPS_NAMES or (args.command == "replay" and args.switch):
            from bir.hooks.commands import ops_main

            return ops_main.run(args)
        if args.command == "replay":
            if not (args.scenario and args.prompt):
                parser.error("bir replay needs --scenario and --prompt (or one of: status, on, off, allow)")
            return _replay(args)
        if args.command in ("install", "uninstall"):
            return _install_command(args)
        if args.command == "logs":
            from bir.hooks.commands.logs import run_logs

            def write(text: str) -> None:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()

            return run_logs(args.project, lines=args.lines, follow_on=args.follow, as_json=args.json, write=write)
        if args.command in ("scenario", "investigate"):
            from bir.hooks.commands.scenario import run_command

            local_replay = getattr(args, "scenario_command", "") == "replay" and not args.dry
            return _replay(args) if local_replay else run_command(args)
        if args.command == "config":
            sys.stdout.write((config.markdown_table() if args.markdown else config.text_table()) + "\n")
            return EXIT_OK
        if args.command == "bench" and args.bench_target == "eval" and args.scenario:
            from bir.benchmarks.scenario_bench import main_args, run_scenario_bench

            return run_scenario_bench(main_args(args), as_json=args.json)
        if args.command == "bench" and args.bench_target == "eval":
            from bir.benchmarks.eval_bench import run_eval_bench

            return run_eval_bench(quick=args.quick, as_json=args.json)
        if args.command == "bench" and args.bench_target == "pin":
            from bir.benchmarks.pin_bench import run_pin_bench

            return run_pin_bench(quick=args.quick, as_json=args.json)
        if args.command == "bench" and args.bench_target == "proxy":
            from bir.benchmarks.proxy_bench import run_proxy_bench

            return run_proxy_bench(quick=args.quick, as_json=args.json)
    except config.ConfigError as exc:
        sys.stderr.write(f"bir: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("bir: interrupted\n")
        return EXIT_INTERRUPTED
    parser.error("unknown command")  # exits with status 2


if __name__ == "__main__":
    raise SystemExit(main())
