"""What every operator command shares: its result for a person or for ``--json``, its refusal, its help.

A command returns a ``CommandResult`` (sentences for a person, a plain object for ``--json``) or raises
``CommandError``, whose message says what to do next; ``bir.cli`` prints either the way the command
line asked (``--json``: one document on stdout, ``{"error": …, "message": …}`` for a refusal). Its log
lines go to ``<BIR_HOME>/logs/bir.log`` (``--verbose``: stderr): a command talks, and what it logs is
for later.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from bir.core import config
from bir.core.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MISSING_TARGET, EXIT_OK, EXIT_USAGE
from bir.core.log import log_to_file, logs_dir
from bir.core.printable import printable, printable_json
from bir.hooks.commands.term import paint, shown, wants_colour

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    Subparsers = argparse._SubParsersAction

EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    ok
  {EXIT_FAILED}    refused or failed (the message says what to do next)
  {EXIT_USAGE}    usage: a bad option or BIR_* value
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
CHECK_EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    ok
  {EXIT_FAILED}    something is broken (each finding says what fixes it)
  {EXIT_USAGE}    usage: a bad option or BIR_* value
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
REPLAY_EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    ok
  {EXIT_FAILED}    the run stopped, was refused, or failed
  {EXIT_USAGE}    usage: a bad option, scenario or BIR_* value
  {EXIT_MISSING_TARGET}    a target parameter has no value
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
BENCH_EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    measured (whether or not the goals were met)
  {EXIT_FAILED}    could not measure, or (--scenario) a body could not be timed: no limit is suggested
  {EXIT_USAGE}    usage: a bad option, scenario or BIR_* value
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
# The ``error`` of the JSON document a refusal prints, by exit status, unless the refusal names its own.
_ERROR_CODES: Final = {EXIT_USAGE: "usage", EXIT_MISSING_TARGET: "missing_target", EXIT_INTERRUPTED: "interrupted"}


class CommandError(Exception):
    """A command refused or failed; the message is for a person and says what to do next.

    ``code`` is the ``error`` field of the ``--json`` document (by default from ``exit_code``:
    ``usage``, else ``failed``).
    """

    def __init__(self, message: str, exit_code: int = EXIT_FAILED, code: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code or _ERROR_CODES.get(exit_code, "failed")


@dataclass(frozen=True)
class CommandResult:
    """What a command did: ``text`` for a person, ``data`` for ``--json``, ``warnings`` for both."""

    text: str
    data: Mapping[str, Any]
    warnings: tuple[str, ...] = field(default=())
    exit_code: int = EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {**self.data, "warnings": list(self.warnings)}


def print_result(result: CommandResult, as_json: bool, out: TextIO) -> int:
    """Write ``result`` (one JSON document with ``as_json``) and answer its exit status."""
    if as_json:
        write_json(result.to_json(), out)
        return result.exit_code
    # The words carry names, intents and outputs that came from tools and services: never an escape sequence.
    colour = wants_colour(out)
    out.write(shown(result.text, colour) + "\n")
    for warning in result.warnings:
        out.write(paint("warning: ", "yellow", colour) + printable(warning) + "\n")
    return result.exit_code


def write_json(document: Mapping[str, Any], out: TextIO) -> None:
    """The one JSON document a ``--json`` command prints (no raw control character, ``printable_json``)."""
    out.write(printable_json(json.dumps(document, indent=2, ensure_ascii=False, default=str)) + "\n")


def print_refusal(name: str, code: str, message: str, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    """A refusal: ``{"error": code, "message": …}`` on ``out`` with ``as_json``, else ``name: message`` on ``err``."""
    if as_json:
        write_json({"error": code, "message": message}, out)
    else:
        err.write(f"{name}: {printable(message)}\n")


def log_for_later(name: str = "bir.log") -> None:
    """Send this command's log lines (a refused request, …) to ``<BIR_HOME>/logs/<name>``, not the screen."""
    with contextlib.suppress(OSError):
        log_to_file(logs_dir(config.home()) / name)


def add_command(
    sub: Subparsers, name: str, helptext: str, examples: Sequence[str], codes: str = EXIT_CODES
) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples and its exit codes."""
    label = "example" if len(examples) == 1 else "examples"
    shown = "\n".join(f"  {line}" for line in examples)
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=helptext,
        description=helptext,
        epilog=f"{label}:\n{shown}\n\n{codes}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # What a refusal or a usage error calls the command ("bir bench eval", "bir login"), and whose usage it shows.
    parser.set_defaults(command_name=parser.prog, command_parser=parser)
    return parser


def project_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default=".", help="the project directory (default: the working directory)")


def json_flag(parser: argparse.ArgumentParser, helptext: str = "print one JSON document and nothing else") -> None:
    """``--json`` and ``--verbose``: with ``--json`` nothing but the document is written, unless ``--verbose``
    sends the log lines to stderr."""
    parser.add_argument("--json", action="store_true", help=helptext)
    verbose_flag(parser)


def verbose_flag(parser: argparse.ArgumentParser, log: str = "bir.log") -> None:
    parser.add_argument("--verbose", action="store_true", help=f"log lines on stderr instead of <BIR_HOME>/logs/{log}")
