"""The ``bir`` command line: a thin layer over the subsystems (``main`` → parse → run → print).

The one composition root: it may import every package. Each command module registers its parser with
``add_parser(sub)`` and answers through ``run(args) -> int`` (set as the parser's default); commands
talk to people on stdout (or print exactly one JSON document with ``--json``), and the JSON log lines
of this process, of the control server it may start and of the proxies it spawns go to
``<BIR_HOME>/logs/`` unless ``--verbose`` sends them to stderr. Every ``BIR_*`` value is checked before
any command runs, so a bad one never costs a network call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from bir import __version__
from bir.benchmarks import cli as bench
from bir.core import config
from bir.core.exits import EXIT_INTERRUPTED, EXIT_USAGE
from bir.hooks.commands import config as config_cmd
from bir.hooks.commands import doctor, install, learn, login, logs, replay, scenario, stats, status, switches
from bir.hooks.commands.result import REPLAY_EXIT_CODES

# In the order `bir --help` lists them.
COMMANDS = (bench, replay, install, learn, status, doctor, stats, switches, login, logs, scenario, config_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bir",
        description="Calculated replay for Claude Code.",
        epilog=REPLAY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"bir {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bir``; answer its exit status (see ``REPLAY_EXIT_CODES``)."""
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        config.validate_all()
        return run(args)
    except config.ConfigError as exc:
        sys.stderr.write(f"bir: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("bir: interrupted\n")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
