"""Which scenarios bir knows call a server, and the mode each arms in with it unwrapped (issue 17 item 1e).

``bir doctor`` names every server of the project that no ``bir-proxy`` wraps; a person then wants to know
what that costs: each known scenario that calls the server's tools, the mode it gets here (steer, since
one step of an unwrapped server makes the whole plan steer, spec §4) and the mode it would get once the
server is wrapped (direct, unless it also has steps that only the session can run). The scenarios bir
knows are the local store's ready ones for this project, when the local service is the one in use, and
the packaged examples. The modes come from ``core.coverage``, as a session computes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bir.core.coverage import ReplayMode, mode_for, servers_of
from bir.core.truncate import one_line

# Named in the finding, at most; the rest are counted.
MAX_SHOWN: Final = 5
_MAX_INTENT_CHARS: Final = 60


@dataclass(frozen=True)
class KnownScenario:
    """A scenario bir knows: its id (or packaged name), where it is, what it does and its steps' tools."""

    name: str
    where: str  # "local store" | "packaged"
    intent: str | None
    tools: tuple[str, ...]


@dataclass(frozen=True)
class ServerMode:
    """A scenario that calls the server: the mode it arms in here, and with the server wrapped."""

    scenario: KnownScenario
    here: ReplayMode
    once_wrapped: ReplayMode

    def to_json(self) -> dict[str, str | None]:
        return {
            "scenario": self.scenario.name,
            "where": self.scenario.where,
            "intent": self.scenario.intent,
            "mode": self.here,
            "modeOnceWrapped": self.once_wrapped,
        }


def modes_of(server: str, scenarios: Iterable[KnownScenario], wrapped: AbstractSet[str]) -> list[ServerMode]:
    """Each of ``scenarios`` that calls ``server``'s tools, with its mode given the ``wrapped`` servers
    (``server`` is not among them) and with ``server`` wrapped too."""
    return [
        ServerMode(s, mode_for(s.tools, wrapped - {server}), mode_for(s.tools, wrapped | {server}))
        for s in scenarios
        if server in servers_of(s.tools)
    ]


def describe(server: str, modes: Sequence[ServerMode]) -> str:
    """The modes in words, for the finding's text: ``fleet-direct (packaged): steer here, direct once
    wrapped; …``, at most ``MAX_SHOWN`` named."""
    if not modes:
        return f"No scenario bir knows calls {server}'s tools yet."
    parts = []
    for mode in modes[:MAX_SHOWN]:
        s = mode.scenario
        what = f' "{one_line(s.intent, _MAX_INTENT_CHARS)}"' if s.intent else ""
        later = (
            "direct once it is wrapped"
            if mode.once_wrapped == "direct"
            else "steer even wrapped (it has steps only the session runs)"
        )
        parts.append(f"{s.name}{what} ({s.where}): {mode.here} here, {later}")
    more = len(modes) - MAX_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return f"The scenarios bir knows that call it: {'; '.join(parts)}{tail}."


def known_scenarios(project: Path, *, local: bool) -> tuple[KnownScenario, ...]:
    """The packaged examples, and (``local``: the local service is in use) the local store's ready
    scenarios of ``project``. Never raises: a store that cannot be read adds none (doctor says why)."""
    from bir.hooks.replay.catalog import packaged

    found = [
        KnownScenario(e.name, "packaged", e.scenario.intent, tuple(s.tool_name for s in e.scenario.steps))
        for e in packaged()
    ]
    if local:
        found += _stored(project)
    return tuple(found)


def _stored(project: Path) -> list[KnownScenario]:
    from bir.core import config
    from bir.hooks.local.store import Store, StoreError, default_path

    path = default_path(config.home())
    if not path.exists():
        return []
    try:
        store = Store(path)
    except StoreError:
        return []
    try:
        rows = store.scenarios_changed_since(0)
    except StoreError:
        return []
    finally:
        store.close()
    key = str(project.resolve())
    out = []
    for row in rows:
        if row.project != key or row.state != "ready":
            continue
        steps = row.body.get("steps") if isinstance(row.body, dict) else None
        tools = tuple(str(s.get("toolName")) for s in steps or [] if isinstance(s, dict))
        intent = row.body.get("intent")
        out.append(KnownScenario(row.id, "local store", intent if isinstance(intent, str) else None, tools))
    return out


__all__ = ["MAX_SHOWN", "KnownScenario", "ServerMode", "describe", "known_scenarios", "modes_of"]
