"""Run the operating commands for ``bir.cli``: parse nothing, print everything (log lines go to
``<BIR_HOME>/logs/bir.log``).

Text for a person on stdout (warnings after it, colour only on a TTY without ``NO_COLOR``), one JSON
document with ``--json``, and a refusal as one line on stderr that says what to do next.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import sys
from typing import Any, Final, TextIO

from bir.core import config
from bir.core.log import log_to_file, logs_dir
from bir.hooks.commands import doctor, status
from bir.hooks.commands import switches as ops_cmd
from bir.hooks.commands.probes import check_service
from bir.hooks.commands.switches import OpsError, Outcome
from bir.hooks.commands.term import paint, wants_colour

MAX_STDIN_TOKEN_BYTES: Final = 16 * 1024


def _print_outcome(outcome: Outcome, as_json: bool, out: TextIO) -> int:
    if as_json:
        out.write(json.dumps(outcome.to_json(), indent=2, ensure_ascii=False) + "\n")
        return outcome.exit_code
    colour = wants_colour(out)
    out.write(outcome.text + "\n")
    for warning in outcome.warnings:
        out.write(paint("warning: ", "yellow", colour) + warning + "\n")
    return outcome.exit_code


def read_token(given: str | None, stdin: TextIO) -> str:
    """The token: ``--token``, else asked for without echo on a TTY, else the first line of stdin.

    Raises:
        OpsError: no token came (usage).
    """
    if given:
        return given
    try:
        if stdin.isatty():
            token = getpass.getpass("BaseIn token (input hidden): ")
        else:
            token = stdin.readline(MAX_STDIN_TOKEN_BYTES)
    except (EOFError, OSError, ValueError):
        token = ""
    if not token.strip():
        raise OpsError("no token: give --token T, type it when asked, or pipe it on stdin", ops_cmd.EXIT_USAGE)
    return token.strip()


def _login(args: argparse.Namespace) -> Outcome:
    url = ops_cmd.login_url(args.url)
    token = read_token(args.token, sys.stdin)
    check = asyncio.run(check_service(url, token))
    return ops_cmd.login(url, token, check.verdict, check.detail)


def _status(args: argparse.Namespace, out: TextIO) -> int:
    facts = asyncio.run(status.gather(args.project))
    broken = bool(status.assess(facts))
    if args.json:
        out.write(json.dumps(status.render_json(facts), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(status.render_text(facts, wants_colour(out)) + "\n")
    return ops_cmd.EXIT_REFUSED if broken else ops_cmd.EXIT_OK


def _doctor(args: argparse.Namespace, out: TextIO) -> int:
    facts = asyncio.run(doctor.gather(args.project))
    diagnosis = doctor.diagnose(facts)
    if args.json:
        out.write(json.dumps(doctor.render_json(facts, diagnosis), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(doctor.render_text(facts, diagnosis, wants_colour(out)) + "\n")
    return ops_cmd.EXIT_REFUSED if diagnosis.broken else ops_cmd.EXIT_OK


def _outcome(args: argparse.Namespace) -> Outcome:
    command = args.command
    if command == "replay":
        if args.switch == "status":
            return ops_cmd.replay_status(args.project)
        if args.switch in ("on", "off"):
            return ops_cmd.replay_switch(args.project, args.switch == "on")
        if not args.servers:
            raise OpsError("say which servers: bir replay allow fleet,github  (or: bir replay allow all)", 2)
        return ops_cmd.replay_allow(args.project, args.servers)
    simple: dict[str, Any] = {
        "off": ops_cmd.runner_off,
        "on": ops_cmd.runner_on,
        "logout": ops_cmd.logout,
        "up": lambda: ops_cmd.bring_up(args.project),
        "down": lambda: ops_cmd.bring_down(args.project),
        "login": lambda: _login(args),
    }
    result: Outcome = simple[command]()
    return result


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one operating command (``bir replay status|on|off|allow``, ``off``, ``on``, ``up``, ``down``,
    ``login``, ``logout``, ``status``, ``doctor``); answer its exit status.

    Raises:
        ConfigError: a ``BIR_*`` variable holds an unusable value (the CLI prints it).
    """
    out = sys.stdout if out is None else out
    # These commands talk to people: their log lines (a refused request, …) go to a file, not the screen.
    with contextlib.suppress(OSError):
        log_to_file(logs_dir(config.home()) / "bir.log")
    name = f"bir {args.command}" + (f" {args.switch}" if args.command == "replay" else "")
    try:
        if args.command == "status":
            return _status(args, out)
        if args.command == "doctor":
            return _doctor(args, out)
        return _print_outcome(_outcome(args), bool(getattr(args, "json", False)), out)
    except OpsError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        return exc.exit_code
