"""A control server that does not answer is remembered (issue 16 item 5).

A server that stops answering with its pid still alive (stopped, wedged, swapped out) would cost every
hook its whole deadline: 13.5 s per tool call. The first hook that times out writes
``<BIR_HOME>/control/<key>.stalled`` holding the server's pid; while it names the live server, every
later hook answers ``{}`` at once without a round trip. The server clears it as soon as it runs again
(``bir-hooks`` looks every ``CLEAR_EVERY_S``), and a new server never inherits it (another pid).

Standard library only: ``bir-hook`` reads the stamp at every tool call (one ``open`` that usually fails).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from bir.core.home_files import private_dir, read_private, write_private
from bir.core.paths import pid_alive, stall_stamp

CLEAR_EVERY_S: Final = 1.0
_MAX_BYTES: Final = 32


def _stamped_pid(path: Path) -> int | None:
    try:
        text = read_private(path, _MAX_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_stalled(home: Path, project: Path, pid: int) -> bool:
    """Whether a hook found the server ``pid`` of ``project`` not answering, and it has not run since."""
    return _stamped_pid(stall_stamp(home, project)) == pid


def mark_stalled(home: Path, project: Path, pid: int) -> None:
    """Remember that the server ``pid`` did not answer in time.

    Raises:
        OSError: the stamp cannot be written.
    """
    private_dir(home, "control")
    write_private(stall_stamp(home, project), f"{pid}\n".encode("ascii"))


def clear_stalled(home: Path, project: Path, pid: int) -> bool:
    """Remove the stamp when it names this server (``pid``, which is running) or one that is gone; True if removed.

    Never raises: a stamp that cannot be removed is looked at again next time.
    """
    path = stall_stamp(home, project)
    if not path.exists():
        return False
    stamped = _stamped_pid(path)
    if stamped is not None and stamped != pid and pid_alive(stamped):
        return False
    with contextlib.suppress(OSError):
        os.unlink(path)
        return True
    return False
