"""The off switch, one rule for every process: ``BIR_OFF=1``, or the file ``<BIR_HOME>/off`` (``bir off``).

Standard library only: ``bir-hook`` reads it at every tool call (``BIR_OFF`` and ``BIR_HOME`` come from
the caller's ``Settings``, or from ``config.off`` and ``config.home`` on ``bir-hook``'s path).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from bir.core.paths import off_file


class OffState(NamedTuple):
    """Whether the runner is off, and by which switch (a tuple: ``bir-hook`` imports no ``dataclasses``)."""

    env: bool
    file: bool
    path: str

    @property
    def off(self) -> bool:
        return self.env or self.file


def file_says_off(path: Path) -> bool:
    """Whether the off file exists; a home bir cannot look into is not a request to switch bir off."""
    try:
        return path.exists()
    except OSError:
        return False


def read_off(env_off: bool, home: Path) -> OffState:
    """The off switch now: ``env_off`` (``BIR_OFF``, as the process read it) and the off file under ``home``."""
    path = off_file(home)
    return OffState(env=env_off, file=file_says_off(path), path=str(path))


def runner_off(env_off: bool, home: Path) -> bool:
    """Whether the whole runner is out of the way now (``env_off`` is looked at first: no file access)."""
    return env_off or file_says_off(off_file(home))
