"""The workload benchmark's stream of work (issue 19 item 5): task templates over the two demo servers,
with what each prompt needs called, and a reproducible, shuffled stream of them. Pure.

Fourteen templates, over ``fleet`` (JSON text content) and ``tracker`` (structuredContent, text lines):
one call; a list, a pick by a rule and a detail; a number; a status; a line of text read by its first
word; two servers in one task. Four of them are *distractors*: they share most of their words with
another template but need other calls ("the safest device" against "the riskiest device", "the oldest
open issue" against "the top priority open issue", "the first device" against both, "the closed issues"
is not one: it is the same task as "the open issues" with another value, and a replay of it must call
``status: closed``). What a prompt needs is computed from the servers' own data, so a replay that called
anything else is a wrong replay.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bir.examples import fleet_server, tracker_server

Call = tuple[str, dict[str, Any]]
REGIONS: Final = fleet_server.REGIONS
DEVICES: Final = tuple(d["id"] for d in fleet_server.FLEET)
PROJECTS: Final = tuple(p for p in tracker_server.ISSUES if tracker_server.search_issues(p, "open"))
KEYS: Final = tuple(r["key"] for rows in tracker_server.ISSUES.values() for r in rows)
PIPELINES: Final = tracker_server.PIPELINES
TEAMS: Final = tuple(tracker_server.TEAMS)


@dataclass(frozen=True)
class Template:
    """One task: its prompt with ``{slots}``, how its values are drawn, and the calls a prompt of it needs."""

    name: str
    text: str
    draw: Callable[[random.Random], dict[str, Any]]
    calls: Callable[[Mapping[str, Any]], list[Call]]
    distractor_of: str | None = None

    def prompt(self, values: Mapping[str, Any]) -> str:
        return self.text.format(**values)


@dataclass(frozen=True)
class Prompt:
    """One prompt of the stream: its template, its values, the calls it needs, its place among its
    template's prompts (0 for the first)."""

    template: str
    text: str
    values: Mapping[str, Any]
    calls: list[Call]
    occurrence: int


def _devices(region: str) -> list[dict[str, Any]]:
    return fleet_server.list_devices_in(region)


def _by(rows: Sequence[Mapping[str, Any]], field: str, *, low: bool = False) -> Mapping[str, Any]:
    return (min if low else max)(rows, key=lambda r: r[field])


def _riskiest(v: Mapping[str, Any]) -> list[Call]:
    top = _by(_devices(v["region"]), "risk")
    return [("mcp__fleet__list_devices", {"region": v["region"]}), ("mcp__fleet__get_device", {"id": top["id"]})]


def _safest(v: Mapping[str, Any]) -> list[Call]:
    low = _by(_devices(v["region"]), "risk", low=True)
    return [("mcp__fleet__list_devices", {"region": v["region"]}), ("mcp__fleet__get_device", {"id": low["id"]})]


def _first_device(v: Mapping[str, Any]) -> list[Call]:
    first = _devices(v["region"])[0]
    return [("mcp__fleet__list_devices", {"region": v["region"]}), ("mcp__fleet__get_device", {"id": first["id"]})]


def _top_issue(v: Mapping[str, Any]) -> list[Call]:
    rows = tracker_server.search_issues(v["project"], "open")
    search = ("mcp__tracker__search_issues", {"project": v["project"], "status": "open"})
    return [search, ("mcp__tracker__get_issue", {"key": _by(rows, "priority")["key"]})]


def _oldest_issue(v: Mapping[str, Any]) -> list[Call]:
    rows = tracker_server.search_issues(v["project"], "open")
    search = ("mcp__tracker__search_issues", {"project": v["project"], "status": "open"})
    return [search, ("mcp__tracker__get_issue", {"key": _by(rows, "ageDays")["key"]})]


def _latest_build(v: Mapping[str, Any]) -> list[Call]:
    latest = tracker_server.builds_text(v["pipeline"]).split("\n")[0].split()[0]
    return [
        ("mcp__tracker__list_builds", {"pipeline": v["pipeline"]}),
        ("mcp__tracker__get_build_log", {"build": latest}),
    ]


def _riskiest_and_oncall(v: Mapping[str, Any]) -> list[Call]:
    return [*_riskiest(v), ("mcp__tracker__who_is_oncall", {"team": v["team"]})]


def _pick(values: Sequence[Any]) -> Callable[[random.Random], Any]:
    return lambda rng: rng.choice(list(values))


def _draw(**pickers: Callable[[random.Random], Any]) -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {name: pick(rng) for name, pick in pickers.items()}


TEMPLATES: Final[tuple[Template, ...]] = (
    Template(
        "devices",
        "list the devices in {region}",
        _draw(region=_pick(REGIONS)),
        lambda v: [("mcp__fleet__list_devices", {"region": v["region"]})],
    ),
    Template(
        "riskiest", "find the riskiest device in {region} and show its details", _draw(region=_pick(REGIONS)), _riskiest
    ),
    Template(
        "device",
        "show the details of device {device}",
        _draw(device=_pick(DEVICES)),
        lambda v: [("mcp__fleet__get_device", {"id": v["device"]})],
    ),
    Template(
        "first_n",
        "list the first {n} devices in {region}",
        _draw(n=lambda rng: rng.randint(2, 6), region=_pick(REGIONS)),
        lambda v: [("mcp__fleet__list_devices", {"region": v["region"], "limit": v["n"]})],
    ),
    Template(
        "issues",
        "list the {status} issues of project {project}",
        _draw(status=_pick(("open", "closed")), project=_pick(PROJECTS)),
        lambda v: [("mcp__tracker__search_issues", {"project": v["project"], "status": v["status"]})],
    ),
    Template(
        "top_issue", "show the top priority open issue of project {project}", _draw(project=_pick(PROJECTS)), _top_issue
    ),
    Template(
        "issue", "show issue {key}", _draw(key=_pick(KEYS)), lambda v: [("mcp__tracker__get_issue", {"key": v["key"]})]
    ),
    Template(
        "latest_build",
        "show the log of the latest build of pipeline {pipeline}",
        _draw(pipeline=_pick(PIPELINES)),
        _latest_build,
    ),
    Template(
        "oncall",
        "who is on call for team {team}",
        _draw(team=_pick(TEAMS)),
        lambda v: [("mcp__tracker__who_is_oncall", {"team": v["team"]})],
    ),
    Template(
        "riskiest_oncall",
        "find the riskiest device in {region} and tell me who is on call for team {team}",
        _draw(region=_pick(REGIONS), team=_pick(TEAMS)),
        _riskiest_and_oncall,
    ),
    Template(
        "safest",
        "find the safest device in {region} and show its details",
        _draw(region=_pick(REGIONS)),
        _safest,
        distractor_of="riskiest",
    ),
    Template(
        "first_device",
        "find the first device in {region} and show its details",
        _draw(region=_pick(REGIONS)),
        _first_device,
        distractor_of="riskiest",
    ),
    Template(
        "oldest_issue",
        "show the oldest open issue of project {project}",
        _draw(project=_pick(PROJECTS)),
        _oldest_issue,
        distractor_of="top_issue",
    ),
    Template(
        "device_oncall",
        "show the details of device {device} and who is on call for team {team}",
        _draw(device=_pick(DEVICES), team=_pick(TEAMS)),
        lambda v: [
            ("mcp__fleet__get_device", {"id": v["device"]}),
            ("mcp__tracker__who_is_oncall", {"team": v["team"]}),
        ],
        distractor_of="device",
    ),
)


def stream(*, seed: int, per_template: int, per_distractor: int) -> list[Prompt]:
    """The prompts, shuffled with ``seed``: ``per_template`` of each template, ``per_distractor`` of each
    distractor, each with values drawn apart from the same template's earlier ones where they can be."""
    rng = random.Random(seed)
    drawn: list[tuple[Template, dict[str, Any]]] = []
    for template in TEMPLATES:
        count = per_distractor if template.distractor_of else per_template
        seen: list[dict[str, Any]] = []
        for _ in range(count):
            values = template.draw(rng)
            for _retry in range(8):
                if values not in seen:
                    break
                values = template.draw(rng)
            seen.append(values)
            drawn.append((template, values))
    rng.shuffle(drawn)
    counts: dict[str, int] = {}
    out = []
    for template, values in drawn:
        n = counts.get(template.name, 0)
        counts[template.name] = n + 1
        out.append(Prompt(template.name, template.prompt(values), values, template.calls(values), n))
    return out
