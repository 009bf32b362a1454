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

    cfg = sub.add_parser("config", help="the BIR_* variables")
    cfg.add_argument("--markdown", action="store_true", help="print the README's table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "config":
            sys.stdout.write(markdown_table() + "\n")
            return 0
        if args.command == "bench" and args.bench_target == "eval":
            from bir.evaluator.bench import run_eval_bench

            return run_eval_bench(quick=args.quick, as_json=args.json)
    except ConfigError as exc:
        sys.stderr.write(f"bir: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    parser.error("unknown command")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
