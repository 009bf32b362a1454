"""The ``bir`` command line: a thin layer over the subsystems (``main`` → parse → run)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bir.core.config import ConfigError, markdown_table


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bir", description="Calculated replay for Claude Code.")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="measure bir's hot paths")
    bench_sub = bench.add_subparsers(dest="bench_target", required=True)
    ev = bench_sub.add_parser("eval", help="the evaluator pool against the in-process floor")
    ev.add_argument("--quick", action="store_true", help="fewer iterations (about 20 s)")
    ev.add_argument("--json", action="store_true", help="print one JSON document")
    px = bench_sub.add_parser("proxy", help="what bir-proxy adds to a tools/call, and a direct step's round trip")
    px.add_argument("--quick", action="store_true", help="fewer iterations (about 30 s)")
    px.add_argument("--json", action="store_true", help="print one JSON document")

    rp = sub.add_parser("replay", help="run a scenario's plan through the control server and the proxies")
    rp.add_argument("--scenario", required=True, help="a scenario file, or a scn_ id on the service")
    rp.add_argument("--prompt", required=True, help="the request the scenario is replayed for")
    rp.add_argument("--param", action="append", metavar="NAME=VALUE", help="a parameter value (wins over derivation)")
    rp.add_argument(
        "--wrap", action="append", metavar="NAME=COMMAND", help="with no control server: wrap this stdio MCP server"
    )
    rp.add_argument("--dry", action="store_true", help="derive and plan only: run no step")
    rp.add_argument("--json", action="store_true", help="print one JSON document")
    rp.add_argument("--project", default=".", help="the project directory (default: the working directory)")

    for name, helptext, replay_help in (
        ("install", "wire bir into a project's Claude Code hooks and MCP servers", "also turn replay on"),
        ("uninstall", "take bir out of a project, restoring what install changed", "only turn replay off"),
    ):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("--replay", action="store_true", help=replay_help)
        cmd.add_argument("--project", default=".", help="the project directory (default: the working directory)")
        cmd.add_argument("--json", action="store_true", help="print one JSON document describing what changed")

    cfg = sub.add_parser("config", help="the BIR_* variables")
    cfg.add_argument("--markdown", action="store_true", help="print the README's table")
    return parser


def _install_command(args: argparse.Namespace) -> int:
    import json

    from bir.hooks.install import InstallError, describe, find_executables, install, uninstall

    try:
        if args.command == "install":
            change = install(args.project, replay=args.replay, exes=find_executables())
        else:
            change = uninstall(args.project, replay_only=args.replay)
    except InstallError as exc:
        sys.stderr.write(f"bir {args.command}: {exc}\n")
        return 1
    text = json.dumps(change.to_json(), indent=2) if args.json else describe(change)
    sys.stdout.write(text + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "replay":
            import asyncio

            from bir.hooks.replay_cmd import ReplayUsageError, main_args, run_replay

            try:
                replay_args = main_args(args)
            except ReplayUsageError as exc:
                sys.stderr.write(f"bir replay: {exc}\n")
                return 2
            return asyncio.run(run_replay(replay_args))
        if args.command in ("install", "uninstall"):
            return _install_command(args)
        if args.command == "config":
            sys.stdout.write(markdown_table() + "\n")
            return 0
        if args.command == "bench" and args.bench_target == "eval":
            from bir.benchmarks.eval_bench import run_eval_bench

            return run_eval_bench(quick=args.quick, as_json=args.json)
        if args.command == "bench" and args.bench_target == "proxy":
            from bir.benchmarks.proxy_bench import run_proxy_bench

            return run_proxy_bench(quick=args.quick, as_json=args.json)
    except ConfigError as exc:
        sys.stderr.write(f"bir: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    parser.error("unknown command")  # exits with status 2


if __name__ == "__main__":
    raise SystemExit(main())
