"""``bir login`` and ``bir logout``: the sign-in to the BaseIn service, stored ``0600`` under ``BIR_HOME``."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Final, TextIO

from bir.core import config, credentials
from bir.core.exits import EXIT_OK, EXIT_USAGE
from bir.hooks.commands.probes import check_service
from bir.hooks.commands.result import (
    CommandError,
    CommandResult,
    Subparsers,
    add_command,
    json_flag,
    log_for_later,
    print_result,
)

MAX_STDIN_TOKEN_BYTES: Final = 16 * 1024


def login_url(given: str | None) -> str:
    """The URL ``bir login`` signs in to: ``--url``, else ``BIR_AUTH_URL``, else the stored one.

    Raises:
        CommandError: none of them is set, or the URL is not usable (usage).
    """
    url = given or config.get_str("BIR_AUTH_URL")
    if url is None:
        stored = credentials.load()
        url = stored.url if stored is not None else None
    if url is None:
        raise CommandError(
            "no service URL: give it with --url (bir login --url https://basein.example.com)", EXIT_USAGE
        )
    try:
        return credentials.normalize_url(url)
    except ValueError as exc:
        raise CommandError(f"{exc}; give a URL such as https://basein.example.com", EXIT_USAGE) from None


def login(url: str, token: str, verdict: str, detail: str) -> CommandResult:
    """``bir login``: store the sign-in unless the service refused the token (``verdict`` from ``probes``).

    Raises:
        CommandError: the service refused the token, the token is not usable (usage), or the file cannot be written.
    """
    if verdict == "refused":
        raise CommandError(
            f"the service at {url} refused this token ({detail}); nothing was stored. "
            "Get a new token and run `bir login` again"
        )
    try:
        saved = credentials.save(url, token)
    except ValueError as exc:
        raise CommandError(f"{exc}; nothing was stored", EXIT_USAGE) from None
    except credentials.CredentialsError as exc:
        raise CommandError(f"{exc}; make {config.home()} writable and run `bir login` again") from exc
    path = credentials.credentials_path()
    checked = {
        "accepted": "The service accepted the token.",
        "unreachable": f"The service could not be reached ({detail}), so the token is not checked yet: "
        "run `bir status` once it is up.",
        "unexpected": f"The service answered something unexpected ({detail}), so the token is not checked yet.",
    }.get(verdict, "")
    lines = [f"Signed in to {saved.url}. {checked}".rstrip(), f"  Stored in {path} (readable only by you)."]
    warnings: list[str] = []
    env_url, env_token = config.get_str("BIR_AUTH_URL"), config.get_str("BIR_TOKEN")
    if env_url and credentials.normalize_url(env_url) != saved.url:
        warnings.append(f"BIR_AUTH_URL in this environment wins over the stored sign-in: {env_url}")
    if env_token:
        warnings.append("BIR_TOKEN in this environment wins over the stored token")
    data = {"url": saved.url, "stored": str(path), "check": verdict, "detail": detail}
    return CommandResult("\n".join(lines), data, tuple(warnings), EXIT_OK)


def logout() -> CommandResult:
    """``bir logout``: forget the stored sign-in.

    Raises:
        CommandError: the file cannot be removed.
    """
    try:
        removed = credentials.remove()
    except credentials.CredentialsError as exc:
        raise CommandError(f"{exc}; remove it by hand") from exc
    text = "Signed out: the stored sign-in is removed." if removed else "There was no stored sign-in."
    warnings = []
    if config.get_str("BIR_TOKEN") or config.get_str("BIR_AUTH_URL"):
        warnings.append("BIR_AUTH_URL / BIR_TOKEN in this environment still sign in what starts here: unset them")
    return CommandResult(text, {"removed": removed}, tuple(warnings))


def read_token(given: str | None, stdin: TextIO) -> str:
    """The token: ``--token``, else asked for without echo on a TTY, else the first line of stdin.

    Raises:
        CommandError: no token came (usage).
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
        raise CommandError("no token: give --token T, type it when asked, or pipe it on stdin", EXIT_USAGE)
    return token.strip()


def add_parser(sub: Subparsers) -> None:
    """Register ``bir login`` and ``bir logout``."""
    cmd = add_command(
        sub, "login", "sign in to the BaseIn service (stored 0600; BIR_AUTH_URL/BIR_TOKEN win)", ["bir login --url URL"]
    )
    cmd.add_argument("--url", help="the service's base URL (default: BIR_AUTH_URL, else the stored one)")
    cmd.add_argument("--token", help="the token (default: asked for without echo, or read from stdin)")
    json_flag(cmd)
    cmd.set_defaults(run=run)
    out = add_command(sub, "logout", "forget the stored sign-in", ["bir logout"])
    json_flag(out)
    out.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``bir login`` or ``bir logout``; answer its exit status."""
    log_for_later()
    try:
        if args.command == "logout":
            result = logout()
        else:
            url = login_url(args.url)
            token = read_token(args.token, sys.stdin)
            check = asyncio.run(check_service(url, token))
            result = login(url, token, check.verdict, check.detail)
    except CommandError as exc:
        sys.stderr.write(f"bir {args.command}: {exc}\n")
        return exc.exit_code
    return print_result(result, args.json, sys.stdout)
