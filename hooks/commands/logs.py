"""``bir logs [-f]``: the project's control-server log, for a person.

The control server (started by ``bir up``, ``bir-hooks`` or a hook's revive) writes its JSON lines
to ``<BIR_HOME>/logs/<project key>.log``, rotated to ``.log.1``. This prints the last lines as
``time  event  key=value …`` (or the JSON lines as they are with ``--json``) and, with ``--follow``,
keeps printing new ones, across a rotation, until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TextIO

from bir.core import config
from bir.core.home_files import open_private
from bir.core.log import logs_dir
from bir.core.paths import project_key, resolve_project
from bir.core.printable import printable
from bir.hooks.commands.result import Subparsers, add_command, project_flag

MAX_LINES: Final = 10_000
MAX_SHOWN_CHARS: Final = 400
POLL_S: Final = 0.25
_SKIPPED: Final = ("ts", "event")


def project_log(project: str | os.PathLike[str], home: Path | None = None) -> Path:
    """Where the control server of ``project`` writes its log lines."""
    return logs_dir(home or config.home()) / f"{project_key(resolve_project(project))}.log"


def _open_log(path: Path) -> TextIO:
    """A log file for reading: never a link, a FIFO or another user's file (``bir.core.home_files``)."""
    return open(open_private(path, "read"), encoding="utf-8", errors="replace")


def last_lines(path: Path, count: int) -> list[str]:
    """The last ``count`` lines of the log, the rotated file's included."""
    kept: deque[str] = deque(maxlen=max(0, min(count, MAX_LINES)))
    for part in (path.with_name(path.name + ".1"), path):
        try:
            with _open_log(part) as f:
                kept.extend(line.rstrip("\n") for line in f)
        except FileNotFoundError:
            continue
    return list(kept)


def human(line: str) -> str:
    """One JSON log line as ``HH:MM:SS  event  key=value …``; a line that is not one, as it is."""
    try:
        record = json.loads(line)
    except ValueError:
        return line[:MAX_SHOWN_CHARS]
    if not isinstance(record, dict):
        return line[:MAX_SHOWN_CHARS]
    ts = record.get("ts")
    when = time.strftime("%H:%M:%S", time.localtime(ts)) if isinstance(ts, int | float) else "--:--:--"
    fields = " ".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)}"
        for key, value in record.items()
        if key not in _SKIPPED and value is not None
    )
    text = f"{when}  {record.get('event', '?')}  {fields}".rstrip()
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 1] + "…"


def follow(path: Path, *, stop: Callable[[], bool] = lambda: False, poll_s: float = POLL_S) -> Iterator[str]:
    """The lines written to ``path`` from now on, reopening it when it is rotated or recreated."""
    handle = None
    identity: tuple[int, int] | None = None
    pending = ""
    try:
        # What is there already was shown by ``last_lines``; a file made later is read from its start.
        with contextlib.suppress(FileNotFoundError):
            handle = _open_log(path)
            handle.seek(0, os.SEEK_END)
            opened = os.fstat(handle.fileno())
            identity = (opened.st_dev, opened.st_ino)
        while not stop():
            st: os.stat_result | None
            try:
                st = path.stat()
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_dev, st.st_ino) != identity:
                if handle is not None:
                    # What the old file got before its rotation still counts.
                    pending += handle.read()
                    handle.close()
                handle = _open_log(path)
                identity = (st.st_dev, st.st_ino)
            if handle is not None:
                pending += handle.read()
            *complete, pending = pending.split("\n")
            yield from complete
            if not complete:
                time.sleep(poll_s)
    finally:
        if handle is not None:
            handle.close()


def run_logs(
    project: str | os.PathLike[str],
    *,
    lines: int,
    follow_on: bool,
    as_json: bool,
    write: Callable[[str], None],
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print the project's last ``lines`` log lines, then new ones while ``follow_on``; answer the exit code."""
    path = project_log(project)
    shown = last_lines(path, lines)
    if not shown and not follow_on:
        if not as_json:  # the log's own JSON lines, and there are none
            write(f"No log yet for {resolve_project(project)} (looked in {path}). `bir up` starts its control server.")
        return 0
    for line in shown:
        write(printable(line if as_json else human(line)))
    if follow_on:
        for line in follow(path, stop=stop):
            write(printable(line if as_json else human(line)))
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``bir logs``."""
    logs = add_command(
        sub,
        "logs",
        "the project's control-server log, readable (JSON lines with --json)",
        ["bir logs -n 20", "bir logs -f"],
    )
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    logs.add_argument("-n", "--lines", type=int, default=50, help="how many of the last lines (default: 50)")
    logs.add_argument("--json", action="store_true", help="the log's own JSON lines as they are, one object a line")
    project_flag(logs)
    logs.set_defaults(run=run)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir logs``."""

    def write(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    return run_logs(args.project, lines=args.lines, follow_on=args.follow, as_json=args.json, write=write)
