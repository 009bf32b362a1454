"""The project's switches as a live session reads them: the stored ones at each use, so a flip needs no
restart (the ``BIR_*`` ones are the process's, read once at its start)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bir.core import config, installed
from bir.core.off_switch import runner_off
from bir.hooks import api


@dataclass(frozen=True)
class Switches:
    """The project's switches as the controller reads them at each prompt."""

    off: bool
    replay: bool
    allow: frozenset[str] | None


SwitchReader = Callable[[], Switches]


def read_switches(project: Path, settings: config.Settings | None = None) -> SwitchReader:
    """The project's switches, read at each use so a flip reaches a running server without a restart.

    Replay is on only where ``bir install --replay`` stored it on (D14) and ``BIR_REPLAY`` is not ``0``;
    the allowlist is ``BIR_REPLAY_ALLOW_SERVERS``, else the project's stored one (the variables of
    ``settings``, read now when None).
    """
    settings = settings if settings is not None else config.load()

    def read() -> Switches:
        try:
            stored = installed.project(project)
        except installed.StoreError:
            stored = None
        replay = installed.replay_on(stored, settings.replay)
        allow = settings.replay_allow_servers
        if allow is None and stored is not None and stored.allow is not None:
            allow = tuple(stored.allow)
        off = runner_off(settings.off, settings.home)
        return Switches(off=off, replay=replay, allow=frozenset(allow) if allow is not None else None)

    return read


def installed_proxies(project: Path) -> frozenset[str]:
    """The servers ``bir install`` put behind ``bir-proxy`` for ``project`` (their proxies will register)."""
    try:
        stored = installed.project(project)
    except installed.StoreError:
        return frozenset()
    if stored is None:
        return frozenset()
    names = stored.install.get("localServers")
    if not isinstance(names, list):
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str) and n != api.BIR_SERVER)
