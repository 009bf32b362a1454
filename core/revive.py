"""Reviving a project's control server from a hook's path: ``bir-hooks revive``, detached and rate-limited.

``bir-hook`` (a command hook) and ``bir-scenario`` (whose ``hook`` tool answers the tool events, and
whose ``run_scenario`` needs the server) both start one when they find no live server: at most once per
``REVIVE_EVERY_S`` per project across every process (a stamp file's mtime), only for a project bir is
installed in, and never after ``bir down`` (which marks the project down until ``bir up`` or the next
install). The revived server publishes its discovery file; whoever started it does not wait for it here.

Standard library only: ``bir-hook`` imports it on the path where no server answered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from bir.core import installed
from bir.core.home_files import private_dir, write_private
from bir.core.paths import revive_stamp

REVIVE_EVERY_S: Final = 10.0


def hooks_command() -> list[str]:
    """How to start ``bir-hooks`` of this installation: the script beside the interpreter or this
    process's script, else ``python -m bir.hooks``."""
    for folder in (Path(sys.executable).parent, Path(sys.argv[0]).resolve().parent if sys.argv[0] else None):
        if folder is not None:
            candidate = folder / "bir-hooks"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return [str(candidate)]
    found = shutil.which("bir-hooks")
    return [found] if found else [sys.executable, "-m", "bir.hooks"]


def revive(home: Path, project: Path, now: float | None = None) -> bool:
    """Start ``bir-hooks revive --project PROJECT`` detached, unless one was started within
    ``REVIVE_EVERY_S``; True if started.

    Raises:
        OSError: the stamp or the process could not be made.
    """
    stamp = revive_stamp(home, project)
    now = time.time() if now is None else now
    try:
        if now - os.lstat(stamp).st_mtime < REVIVE_EVERY_S:
            return False
    except FileNotFoundError:
        pass
    private_dir(home, "control")
    write_private(stamp, b"")
    os.utime(stamp, (now, now), follow_symlinks=False)
    subprocess.Popen(
        [*hooks_command(), "revive", "--project", str(project)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
        cwd=str(project) if project.is_dir() else "/",
    )
    return True


def revive_if_due(home: Path, project: Path) -> bool:
    """``revive`` for an installed project that is not marked down; True if a server was started.

    Raises:
        OSError: the stamp or the process could not be made.
    """
    switches = installed.project(project, home)
    if switches is None or switches.down:
        return False
    return revive(home, project)
