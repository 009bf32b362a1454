"""``bir bench eval|pin|proxy|match|workload``: the benchmarks behind the command line.

Each one shows a progress line on a terminal while it measures (nothing on a pipe, nothing with
``--json``), and prints its report at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Final

from bir.core import config
from bir.core.exits import EXIT_USAGE
from bir.core.truncate import one_line
from bir.hooks.commands.progress import Progress
from bir.hooks.commands.result import BENCH_EXIT_CODES, CommandError, Subparsers, add_command, json_flag

# `claude --version` answers in well under a second; a binary that takes this long is not one to time.
VERSION_TIMEOUT_S: Final = 30.0


def add_parser(sub: Subparsers) -> None:
    """Register ``bir bench`` and its targets."""
    bench = add_command(
        sub,
        "bench",
        "measure bir's hot paths",
        ["bir bench eval --quick", "bir bench pin --quick --json"],
        BENCH_EXIT_CODES,
    )
    targets = bench.add_subparsers(dest="bench_target", required=True)
    ev = add_command(
        targets,
        "eval",
        "the evaluator pool against the in-process floor, or one scenario's bodies (--scenario)",
        [
            "bir bench eval --quick",
            'bir replay --scenario fleet-direct --prompt "the riskiest device in eu-west-1" --param region=eu-west-1 '
            "--wrap fleet='python -m bir.examples.fleet_server' --json > run.json",
            "bir bench eval --scenario fleet-direct --outputs run.json --quick",
        ],
        BENCH_EXIT_CODES,
    )
    ev.add_argument("--quick", action="store_true", help="fewer iterations (about 20 s)")
    json_flag(ev)
    ev.add_argument(
        "--scenario",
        help="time this scenario's own bodies (a file, a packaged name such as fleet-direct, or a scn_ id) and "
        "suggest BIR_LOGIC_TIMEOUT_MS",
    )
    ev.add_argument("--prompt", help="with --scenario: derive the parameters from this request (else the samples)")
    ev.add_argument(
        "--outputs",
        metavar="FILE",
        help="with --scenario: each step's output: a JSON object (step index -> output), or what bir replay --json"
        " printed",
    )
    ev.add_argument("--run", metavar="RUN_ID", help="with --scenario: take the outputs from this source run")
    ev.add_argument("--calls", type=int, help="with --scenario: timed calls per body (default 200, 50 with --quick)")
    ev.set_defaults(run=run)
    pn = add_command(
        targets,
        "pin",
        "what a pinned tool call costs: bir-hook beside bare command hooks, and a whole Claude Code session",
        ["bir bench pin --quick"],
        BENCH_EXIT_CODES,
    )
    pn.add_argument("--quick", action="store_true", help="fewer iterations (about 10 s, without a Claude Code)")
    pn.add_argument(
        "--claude",
        metavar="PATH",
        type=Path,
        help="the Claude Code binary for the whole-session part (default: `claude` on PATH, else none)",
    )
    json_flag(pn)
    pn.set_defaults(run=run)
    px = add_command(
        targets,
        "proxy",
        "what bir-proxy adds to a tools/call, and a direct step's round trip",
        ["bir bench proxy --quick"],
        BENCH_EXIT_CODES,
    )
    px.add_argument("--quick", action="store_true", help="fewer iterations (about 30 s)")
    json_flag(px)
    px.set_defaults(run=run)
    mb = add_command(
        targets,
        "match",
        "the local service's matcher and calculator: latency on a 10,000-scenario store, memory, accuracy",
        ["bir bench match --quick"],
        BENCH_EXIT_CODES,
    )
    mb.add_argument("--quick", action="store_true", help="a 1,000-scenario store and fewer prompts (about 20 s)")
    json_flag(mb)
    mb.set_defaults(run=run)
    wl = add_command(
        targets,
        "workload",
        "what bir saves on a stream of work: prompts replayed against the ideal, wrong replays, tokens, "
        "dollars and seconds, beside the service's rule",
        ["bir bench workload --quick", "bir bench workload --quick --json"],
        BENCH_EXIT_CODES,
    )
    wl.add_argument("--quick", action="store_true", help="a shorter stream and two rules (about a minute)")
    json_flag(wl)
    wl.set_defaults(run=run)


def claude_binary(given: Path) -> Path:
    """``--claude PATH`` as the absolute path of a Claude Code that runs, checked before anything is
    measured: the sessions start later from other folders, where a relative path would mean nothing.

    Raises:
        CommandError: (usage) there is no such file, or it does not answer ``--version``.
    """
    # abspath, not resolve: `..` goes, a symlink (node_modules/.bin/claude) stays the path it was given as.
    claude = Path(os.path.abspath(given.expanduser()))
    if not claude.is_file():
        raise CommandError(f"--claude {claude}: there is no such file (give the claude binary's path)", EXIT_USAGE)
    try:
        answer = subprocess.run(
            [str(claude), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        why = f"no answer within {VERSION_TIMEOUT_S:.0f} s"
        raise CommandError(f"--claude {claude}: `claude --version` does not run ({why})", EXIT_USAGE) from None
    except OSError as exc:
        raise CommandError(f"--claude {claude}: `claude --version` does not run ({exc})", EXIT_USAGE) from None
    if answer.returncode != 0:
        said = one_line(answer.stderr or answer.stdout, 200)
        raise CommandError(
            f"--claude {claude}: `claude --version` exited {answer.returncode}" + (f" ({said})" if said else ""),
            EXIT_USAGE,
        )
    return claude


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run one benchmark; answer its exit status.

    Raises:
        CommandError: the command line cannot be used (a scenario, an outputs file, a --claude that is not there).
    """
    progress = Progress(enabled=False if args.json else None, prefix=f"{args.command_name}: ")
    with progress:
        return _run(args, progress)


def _run(args: argparse.Namespace, progress: Progress) -> int:
    if args.bench_target == "eval" and args.scenario:
        from bir.benchmarks.scenario_bench import ScenarioBenchError, main_args, run_scenario_bench

        try:
            return run_scenario_bench(main_args(args), as_json=args.json, progress=progress)
        except ScenarioBenchError as exc:
            raise CommandError(str(exc), EXIT_USAGE) from None
        except (RuntimeError, OSError) as exc:
            raise CommandError(str(exc)[:500], code="could_not_measure") from None
    if args.bench_target == "eval":
        from bir.benchmarks.eval_bench import run_eval_bench

        return run_eval_bench(quick=args.quick, as_json=args.json, progress=progress)
    if args.bench_target == "pin":
        from bir.benchmarks.pin_bench import run_pin_bench

        claude = None if args.claude is None else claude_binary(args.claude)
        return run_pin_bench(quick=args.quick, as_json=args.json, claude=claude, progress=progress)
    if args.bench_target == "match":
        from bir.benchmarks.match_bench import run_match_bench

        return run_match_bench(quick=args.quick, as_json=args.json, progress=progress)
    if args.bench_target == "workload":
        from bir.benchmarks.workload import run_workload_bench

        return run_workload_bench(quick=args.quick, as_json=args.json, progress=progress)
    from bir.benchmarks.proxy_bench import run_proxy_bench

    return run_proxy_bench(quick=args.quick, as_json=args.json, progress=progress)
