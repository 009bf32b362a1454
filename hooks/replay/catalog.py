"""The scenarios that ship with bir (``bir/examples/scenarios/*.json``), found by name.

``bir replay --scenario fleet-direct`` and ``bir bench eval --scenario fleet-direct`` mean the packaged
file of that name; ``bir replay --list`` shows them with a command line that runs each against the demo
fleet (``python -m bir.examples.fleet_server``). The files are read as package data: no code of
``bir.examples`` is imported (the demo server stands for a third-party one and stays apart).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from typing import Final

from bir.core.coverage import ReplayMode, scenario_mode, servers_of
from bir.core.types import PayloadError, Scenario, parse_qualified_name, parse_scenario

PACKAGE: Final = "bir.examples"
FOLDER: Final = "scenarios"
# The demo servers the packaged scenarios call, as a --wrap runs them.
DEMO_SERVERS: Final = {"fleet": "python -m bir.examples.fleet_server"}


@dataclass(frozen=True)
class Example:
    """One packaged scenario: its name (the file's stem), the file, and what it is."""

    name: str
    file: Traversable
    scenario: Scenario

    @property
    def mode(self) -> ReplayMode:
        return scenario_mode(self.scenario.steps)

    @property
    def builtins(self) -> tuple[str, ...]:
        """The steps' tools that are not MCP tools (they run only inside a Claude Code session)."""
        return tuple(s.tool_name for s in self.scenario.steps if parse_qualified_name(s.tool_name) is None)

    def command(self, python: str = "python") -> str:
        """A ``bir replay`` command line that runs it against the demo fleet, with the samples as parameters
        (``python``: the interpreter the demo server runs in; ``--list`` gives its own, so that the line
        runs whether or not this bir's virtual environment is activated)."""
        words = ["bir", "replay", "--scenario", self.name, "--prompt", self.scenario.intent or self.name]
        for name, spec in self.scenario.params_object.items():
            if spec.role == "target":
                words += ["--param", f"{name}={spec.sample_value}"]
        for server in sorted(servers_of(self.scenario.steps)):
            if server in DEMO_SERVERS:
                demo = shlex.split(DEMO_SERVERS[server])
                demo[0] = python if demo[0] == "python" else demo[0]
                words += ["--wrap", f"{server}={shlex.join(demo)}"]
        if self.builtins:
            words.append("--partial")
        return shlex.join(words)


def _folder() -> Traversable | None:
    try:
        return resources.files(PACKAGE).joinpath(FOLDER)
    except (ModuleNotFoundError, TypeError):
        return None


def packaged() -> list[Example]:
    """Every packaged scenario that reads as one, by name."""
    folder = _folder()
    if folder is None or not folder.is_dir():
        return []
    found: list[Example] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            scenario = parse_scenario(entry.read_text(encoding="utf-8"))
        except (OSError, PayloadError):
            continue
        found.append(Example(entry.name.removesuffix(".json"), entry, scenario))
    return found


def find(name: str) -> Example | None:
    """The packaged scenario called ``name`` (with or without ``.json``), or None."""
    stem = name.removesuffix(".json")
    if not stem or "/" in stem or stem.startswith("."):
        return None
    return next((example for example in packaged() if example.name == stem), None)


def names() -> list[str]:
    return [example.name for example in packaged()]
