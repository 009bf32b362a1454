"""The off switch, one rule for every process: ``BIR_OFF=1``, or the file ``<BIR_HOME>/off`` (``bir off``).

Standard library and ``bir.core.config`` only: ``bir-hook`` reads it at every tool call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from bir.core import config
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


def read_off(env: Mapping[str, str] | None = None) -> OffState:
    """The off switch now.

    Raises:
        ConfigError: ``BIR_OFF`` holds an unusable value.
    """
    path = off_file(config.home(env))
    return OffState(env=bool(config.get_flag("BIR_OFF", env)), file=file_says_off(path), path=str(path))


def runner_off(env: Mapping[str, str] | None = None) -> bool:
    """Whether the whole runner is out of the way now (``BIR_OFF`` is looked at first: no file access).

    Raises:
        ConfigError: ``BIR_OFF`` holds an unusable value.
    """
    return bool(config.get_flag("BIR_OFF", env)) or file_says_off(off_file(config.home(env)))
