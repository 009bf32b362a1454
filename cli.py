"""The ``bir`` command line: a thin layer over the subsystems (``main`` → parse → run → print).

The one composition root: it may import every package. Each command module registers its parser with
``add_parser(sub)`` and answers through ``run(args, settings) -> int`` (set as the parser's default),
``settings`` being every ``BIR_*`` variable read once here (``bir.core.config.load``); commands
talk to people on stdout, or print exactly one JSON document with ``--json`` — a usage error, a
refusal, a bad ``BIR_*`` value and an interrupt included (``{"error": …, "message": …}``) — and then
nothing else on stdout or stderr. The JSON log lines of this process, of the control server it may
start and of the proxies it spawns go to ``<BIR_HOME>/logs/`` unless ``--verbose`` sends them to
stderr. Every ``BIR_*`` value is checked before any command runs (``bir doctor`` and ``bir config``
show a bad one instead, and are given the others with the bad ones read as unset), so a bad one never
costs a network call.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from bir import __version__
from bir.benchmarks import cli as bench
from bir.core import config
from bir.core.exits import EXIT_INTERRUPTED, EXIT_USAGE
from bir.hooks.commands import config as config_cmd
from bir.hooks.commands import demo, doctor, install, learn, login, logs, replay, scenario, stats, status, switches
from bir.hooks.commands.result import REPLAY_EXIT_CODES, CommandError, log_for_later, print_refusal, write_json

# In the order `bir --help` lists them.
COMMANDS = (demo, bench, replay, install, learn, status, doctor, stats, switches, login, logs, scenario, config_cmd)


class UsageError(Exception):
    """A command line argparse refused; ``parser`` is the (sub)command's, for its usage line."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised for ``main`` to print (one JSON document with ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (looked at before parsing, for a usage error's sake)."""
    words = list(argv)
    return "--json" in (words[: words.index("--")] if "--" in words else words)


def _usage(exc: UsageError, as_json: bool) -> int:
    message = f"{exc.parser.prog}: {exc}"
    if as_json:
        write_json({"error": "usage", "message": message, "usage": exc.parser.format_usage().strip()}, sys.stdout)
    else:
        sys.stderr.write(exc.parser.format_usage())
        sys.stderr.write(f"{message} (see `{exc.parser.prog} --help`)\n")
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bir``; answer its exit status (see ``REPLAY_EXIT_CODES``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(words)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(words)
    except UsageError as exc:
        return _usage(exc, as_json)
    if extra:
        # Said by the (sub)command they were given to, with its usage, not by `bir` itself.
        refused = UsageError(getattr(args, "command_parser", parser), f"unrecognized arguments: {' '.join(extra)}")
        return _usage(refused, as_json)
    as_json = bool(getattr(args, "json", False))
    name: str = getattr(args, "command_name", f"bir {args.command}")
    run: Callable[[argparse.Namespace, config.Settings], int] = args.run
    if not getattr(args, "verbose", False):
        log_for_later()

    def refuse(code: str, message: str) -> None:
        print_refusal(name, code, message, as_json=as_json, out=sys.stdout, err=sys.stderr)

    try:
        if getattr(args, "checks_config", True):
            settings = config.load()
        else:
            settings, _ = config.load_lenient()
        return run(args, settings)
    except UsageError as exc:
        return _usage(exc, as_json)
    except CommandError as exc:
        refuse(exc.code, str(exc))
        return exc.exit_code
    except config.ConfigError as exc:
        print_refusal(
            "bir",
            "config",
            f"{exc} (fix it or unset it; `bir doctor` lists every bad value)",
            as_json=as_json,
            out=sys.stdout,
            err=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        print_refusal("bir", "interrupted", "interrupted (Ctrl-C)", as_json=as_json, out=sys.stdout, err=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
