"""``bir learn [--project DIR] [--since DATE] [--dry] [--json]``: learn from what the user already did
(issue 19 item 1).

It reads the project's past Claude Code transcripts, imports each prompt turn into the local store as a
recorded run, calculates the scenarios, and says how many are ready and, grouped, why the others are
not. A second learn reads only what is new. ``bir install`` offers it (``offer``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TextIO

import anyio

from bir.core import config
from bir.core.exits import EXIT_OK
from bir.core.paths import resolve_project
from bir.hooks.commands.result import (
    CommandError,
    CommandResult,
    Subparsers,
    add_command,
    json_flag,
    log_for_later,
    print_result,
    project_flag,
)
from bir.hooks.local import wants_local

# What a person reads the progress line on: redrawn in place, cleared at the end.
_CLEAR: Final = "\r\x1b[K"


def add_parser(sub: Subparsers) -> None:
    """Register ``bir learn``."""
    learn = add_command(
        sub,
        "learn",
        "import this project's past Claude Code sessions as recorded runs and calculate their scenarios",
        ["bir learn", "bir learn --since 2026-11-01 --dry", "bir learn --project ~/src/app --json"],
    )
    project_flag(learn)
    learn.add_argument(
        "--since", metavar="DATE", type=_since, help="only turns from this day on (YYYY-MM-DD, or an ISO time)"
    )
    learn.add_argument("--dry", action="store_true", help="read and count what would be learned; write nothing")
    json_flag(learn)
    learn.set_defaults(run=run)


def parse_since(text: str | None) -> float | None:
    """``--since`` as epoch seconds (a date alone is its midnight, UTC).

    Raises:
        ValueError: not a date.
    """
    if text is None:
        return None
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _since(text: str) -> str:
    """``--since`` checked while the command line is read, so a bad date is a usage error like any other.

    Raises:
        argparse.ArgumentTypeError: not a date.
    """
    try:
        parse_since(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD, or an ISO time)") from None
    return text


class _Progress:
    """One line on a terminal, redrawn in place; nothing anywhere else."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._on = _is_tty(stream)
        self.drawn = False

    def __call__(self, text: str) -> None:
        if self._on:
            self._stream.write(f"{_CLEAR}bir learn: {text[:100]}")
            self._stream.flush()
            self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self._stream.write(_CLEAR)
            self._stream.flush()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _n(count: object, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def describe(data: dict[str, object]) -> str:
    """The report for a person."""
    folder = data.get("folder")
    if folder is None:
        return (
            f"bir learn: Claude Code has no sessions of {data['project']} to learn from (no transcript folder "
            "under ~/.claude/projects, or $CLAUDE_CONFIG_DIR/projects)."
        )
    mb = int(str(data["bytesRead"])) / 2**20
    verb = "would learn" if data["dry"] else "learned"
    lines = [
        f"bir learn: {_n(data['transcripts'], 'transcript')} of {data['project']} ({folder}), {mb:.1f} MB read "
        f"in {data['seconds']} s",
        f"  {_n(data['turns'], 'turn')} read; {verb} {data['imported']} as recorded runs",
    ]
    skipped = data.get("skipped")
    if isinstance(skipped, dict) and skipped:
        lines.append("  passed over: " + ", ".join(f"{n} {why}" for why, n in skipped.items()))
    if not data["dry"]:
        lines.append(
            f"  scenarios: {_n(data['calculated'], 'run')} calculated, {_n(data['ready'], 'scenario')} ready to replay"
        )
        not_ready = data.get("notReady")
        if isinstance(not_ready, dict) and not_ready:
            lines.append(f"  not ready ({sum(int(v) for v in not_ready.values())}):")
            lines += [f"    {n:>4}  {why}" for why, n in not_ready.items()]
    if data.get("stopped"):
        lines.append(f"  stopped early (its {data['stopped']} budget): run bir learn again to go on from there")
    elif not data["dry"]:
        lines.append("bir scenario list shows them; bir learn again reads only what is new.")
    return "\n".join(lines)


async def learn_project(
    project: Path, settings: config.Settings, *, since: float | None, dry: bool, progress: _Progress | None
) -> dict[str, object]:
    """Learn ``project`` into the local store under ``BIR_HOME``; the report's JSON.

    Raises:
        StoreError: the store cannot be used.
    """
    from bir.hooks.local.learn import learn
    from bir.hooks.local.runtime import opened

    async with opened(settings.home, project=project, load_model=False, settings=settings) as service:
        report = await learn(service, project, since=since, dry=dry, progress=progress)
    return report.wire()


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir learn``."""
    from bir.hooks.local.store import StoreError

    log_for_later()
    # Refusals go to bir.cli as CommandError: one JSON document with --json, words on stderr without.
    if not wants_local(settings):
        raise CommandError(
            "learning fills the local store, and this machine uses a remote service (BIR_SERVICE=local to learn here)",
            code="remote_service",
        )
    since = parse_since(args.since)
    project = resolve_project(args.project)
    if not project.is_dir():
        raise CommandError(f"{project} is not a directory")
    progress = _Progress(sys.stderr) if not args.json else None
    try:
        data = anyio.run(lambda: learn_project(project, settings, since=since, dry=args.dry, progress=progress))
    except StoreError as exc:
        raise CommandError(str(exc), code="store_unusable") from None
    finally:
        if progress is not None:
            progress.clear()
    return print_result(CommandResult(text=describe(data), data=data), args.json, sys.stdout)


def offer(project: Path, settings: config.Settings, *, forced: bool, as_json: bool) -> dict[str, object] | None:
    """What ``bir install`` offers: ``--learn`` learns; on a terminal it asks first when the project has past
    sessions; otherwise nothing happens. The report's JSON when it learned, else None. Never raises."""
    from bir.hooks.local.learn import transcript_folder, transcripts_in
    from bir.hooks.local.store import StoreError

    try:
        if not wants_local(settings):
            return None
        folder = transcript_folder(project)
        sessions = len(transcripts_in(folder)) if folder is not None else 0
        if not forced:
            if as_json or not sessions or not (_is_tty(sys.stdin) and _is_tty(sys.stdout)):
                return None
            them, their = ("it", "its") if sessions == 1 else ("them", "their")
            sys.stdout.write(
                f"Claude Code has {_n(sessions, 'past session')} of this project. Learn from {them} now, so "
                f"{their} tasks can be replayed (bir learn)? [y/N] "
            )
            sys.stdout.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                sys.stdout.write("Not now: bir learn does it whenever you like.\n")
                return None
        progress = _Progress(sys.stderr) if not as_json else None
        try:
            data = anyio.run(lambda: learn_project(project, settings, since=None, dry=False, progress=progress))
        finally:
            if progress is not None:
                progress.clear()
    except (StoreError, OSError) as exc:
        sys.stderr.write(f"bir install: learning from past sessions failed: {exc}\n")
        return None
    if not as_json:
        sys.stdout.write(describe(data) + "\n")
    return data


__all__ = ["EXIT_OK", "add_parser", "describe", "offer", "parse_since", "run"]
