"""``bir config``: every ``BIR_*`` variable, the value in effect, its default and where it comes from."""

from __future__ import annotations

import argparse
import sys

from bir.core import config
from bir.core.exits import EXIT_OK
from bir.hooks.commands.result import Subparsers, add_command


def add_parser(sub: Subparsers) -> None:
    """Register ``bir config``."""
    cfg = add_command(
        sub,
        "config",
        "the BIR_* variables: value in effect, default, where from",
        ["bir config", "bir config --markdown"],
    )
    cfg.add_argument("--markdown", action="store_true", help="print the README's table of variables instead")
    # It shows a bad value as `invalid: …` instead of refusing to start.
    cfg.set_defaults(run=run, checks_config=False)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir config``."""
    sys.stdout.write((config.markdown_table() if args.markdown else config.text_table()) + "\n")
    return EXIT_OK
