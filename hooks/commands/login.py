"""``bir login`` and ``bir logout``: the sign-in to the BaseIn service, stored ``0600`` under ``BIR_HOME``.

``bir login`` checks what it is about to store: the URL must answer as the BaseIn service and the
token must be accepted, or nothing is stored (``--no-check`` stores without asking, and says so). The
token comes from a prompt without echo, or from stdin: never from the command line, where ``ps`` and
the shell's history would show it. A control server already running reads the sign-in at its next
request to the service, so neither a login nor a logout needs a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from pathlib import Path
from typing import Final, TextIO

from bir.core import config, credentials
from bir.core.exits import EXIT_OK, EXIT_USAGE
from bir.hooks.commands.probes import ServiceCheck, check_service
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.result import CommandError, CommandResult, Subparsers, add_command, json_flag, print_result
from bir.hooks.commands.switches import bring_up, stop_server
from bir.hooks.discovery import all_discoveries
from bir.hooks.local import wants_local

MAX_STDIN_TOKEN_BYTES: Final = 16 * 1024
EXAMPLE_URL: Final = "https://basein.example.com"
# Running servers read the stored sign-in at each request to the service.
PICKED_UP: Final = "Running control servers use it from their next request to the service (no restart)."
# A server picks the local service or a remote one when it starts: one whose choice a sign-in changed restarts.
RESTARTED: Final = "Restarted {count} running control server(s) on {now} (they served on {was})."


def restart_switched(was_local: bool, settings: config.Settings) -> tuple[str | None, list[str]]:
    """Restart the running control servers when a sign-in change moved this machine between the local
    service and a remote one (a server picks one when it starts); the sentence to add, and what failed."""
    if wants_local(settings) == was_local:
        return None, []
    restarted, failed = 0, []
    for found in all_discoveries():
        project = Path(found.project)
        try:
            if stop_server(project) is not None:
                bring_up(project)
                restarted += 1
        except CommandError as exc:
            failed.append(f"the control server of {project} was not restarted: {exc}")
    if not restarted:
        return None, failed
    was, now = ("the local service", "the service") if was_local else ("the service", "the local service")
    return RESTARTED.format(count=restarted, was=was, now=now), failed


STDIN_WAY: Final = 'printf %s "$BASEIN_TOKEN" | bir login --url "$BASEIN_URL"'


def login_url(given: str | None, settings: config.Settings) -> str:
    """The URL ``bir login`` signs in to: ``--url``, else ``BIR_AUTH_URL``, else the stored one.

    Raises:
        CommandError: none of them is set, or the URL is not usable (usage).
    """
    url = given or settings.auth_url
    if url is None:
        stored = credentials.load(settings.home)
        url = stored.url if stored is not None else None
    if url is None:
        raise CommandError(f"no service URL: give it with --url (bir login --url {EXAMPLE_URL})", EXIT_USAGE)
    try:
        return credentials.normalize_url(url)
    except ValueError as exc:
        raise CommandError(f"{exc}; give a URL such as {EXAMPLE_URL}", EXIT_USAGE) from None


def refuse_unchecked(url: str, check: ServiceCheck) -> None:
    """Refuse a sign-in the service did not accept; nothing is stored.

    Raises:
        CommandError: always, unless ``check`` says the token was accepted.
    """
    again = f"run `bir login --url {url}` again"
    if check.verdict == "refused":
        raise CommandError(
            f"the service at {url} refused this token ({check.detail}); nothing was stored. "
            f"Get a new token and {again}",
            code="token_refused",
        )
    if check.verdict == "unreachable":
        raise CommandError(
            f"the service at {url} could not be reached ({check.detail}); nothing was stored. "
            f"Check the URL and the network and {again}, or store it unchecked with --no-check",
            code="unreachable",
        )
    if check.verdict != "accepted":
        raise CommandError(
            f"{url} did not answer as the BaseIn service ({check.detail}); nothing was stored. "
            f"Check the URL and {again}, or store it unchecked with --no-check",
            code="not_the_service",
        )


def login(url: str, token: str, check: ServiceCheck | None, settings: config.Settings) -> CommandResult:
    """``bir login``: store the sign-in, the service having accepted the token (``check`` None: not checked).

    Raises:
        CommandError: the service did not accept the token, the token is not usable (usage), or the file
            cannot be written.
    """
    if check is not None:
        refuse_unchecked(url, check)
    was_local = wants_local(settings)
    try:
        saved = credentials.save(url, token, settings.home)
    except ValueError as exc:
        raise CommandError(f"{exc}; nothing was stored", EXIT_USAGE) from None
    except credentials.CredentialsError as exc:
        raise CommandError(f"{exc}; make {settings.home} writable and run `bir login` again") from exc
    path = credentials.credentials_path(settings.home)
    if check is None:
        head = (
            f"Stored the sign-in to {saved.url} without checking it (--no-check): bir did not contact the service. "
            "`bir status` checks it."
        )
    else:
        head = f"Signed in to {saved.url}: the service accepted the token."
    restarted, failed = restart_switched(was_local, settings)
    lines = [head, f"  Stored in {path} (readable only by you). {restarted or PICKED_UP}"]
    warnings: list[str] = list(failed)
    env_url, env_token = settings.auth_url, settings.token
    if env_url and credentials.normalize_url(env_url) != saved.url:
        warnings.append(f"BIR_AUTH_URL in this environment wins over the stored sign-in: {env_url}")
    if env_token:
        warnings.append("BIR_TOKEN in this environment wins over the stored token")
    data = {"url": saved.url, "stored": str(path), "checked": check is not None}
    return CommandResult("\n".join(lines), data, tuple(warnings), EXIT_OK)


def logout(settings: config.Settings) -> CommandResult:
    """``bir logout``: forget the stored sign-in.

    Raises:
        CommandError: the file cannot be removed.
    """
    was_local = wants_local(settings)
    try:
        removed = credentials.remove(settings.home)
    except credentials.CredentialsError as exc:
        raise CommandError(f"{exc}; remove it by hand") from exc
    restarted, failed = restart_switched(was_local, settings)
    if removed:
        text = f"Signed out: the stored sign-in is removed. {restarted or PICKED_UP.replace('use it', 'stop using it')}"
    else:
        text = "There was no stored sign-in."
    warnings = list(failed)
    if settings.token or settings.auth_url:
        warnings.append("BIR_AUTH_URL / BIR_TOKEN in this environment still sign in what starts here: unset them")
    return CommandResult(text, {"removed": removed}, tuple(warnings))


def read_token(stdin: TextIO) -> str:
    """The token: asked for without echo on a TTY, else the first line of stdin.

    Raises:
        CommandError: no token came (usage).
    """
    try:
        if stdin.isatty():
            token = getpass.getpass("BaseIn token (input hidden): ")
        else:
            token = stdin.readline(MAX_STDIN_TOKEN_BYTES)
    except (EOFError, OSError, ValueError):
        token = ""
    if not token.strip():
        raise CommandError(f"no token: type it when asked, or pipe it on stdin ({STDIN_WAY})", EXIT_USAGE)
    return token.strip()


def add_parser(sub: Subparsers) -> None:
    """Register ``bir login`` and ``bir logout``."""
    cmd = add_command(
        sub,
        "login",
        "sign in to the BaseIn service: checks that the URL answers and accepts the token (read from stdin, or"
        " asked for without echo), then stores it 0600; BIR_AUTH_URL/BIR_TOKEN win",
        [STDIN_WAY],
    )
    cmd.add_argument("--url", help="the service's base URL (default: BIR_AUTH_URL, else the stored one)")
    cmd.add_argument(
        "--no-check", action="store_true", help="store the sign-in without contacting the service (says so)"
    )
    # Refused loudly rather than unknown: an old script's `--token T` learns the way that keeps it out of `ps`.
    cmd.add_argument("--token", help=argparse.SUPPRESS)
    json_flag(cmd)
    cmd.set_defaults(run=run)
    out = add_command(sub, "logout", "forget the stored sign-in", ["bir logout"])
    json_flag(out)
    out.set_defaults(run=run)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir login`` or ``bir logout``; answer its exit status.

    Raises:
        CommandError: refused (the message says what to do next).
    """
    if args.command == "logout":
        return print_result(logout(settings), args.json, sys.stdout)
    if args.token is not None:
        raise CommandError(
            "--token puts the token in `ps` and in your shell's history, so bir does not take it: "
            f"pipe it on stdin ({STDIN_WAY}) or type it when asked",
            EXIT_USAGE,
            code="token_on_command_line",
        )
    url = login_url(args.url, settings)
    token = read_token(sys.stdin)
    check = None
    if not args.no_check:
        with for_command(args) as progress:
            progress(f"checking the token with {url}…")
            check = asyncio.run(check_service(url, token, settings=settings))
    return print_result(login(url, token, check, settings), args.json, sys.stdout)
