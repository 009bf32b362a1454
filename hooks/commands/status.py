"""``bir status``: one screen about a project (issue 11 item 2).

``gather`` does the I/O (the store, the off switch, the discovery file and ``/health``, one cheap
request to the service); ``assess`` turns those facts into what is broken; ``render_text`` and
``render_json`` print them. Only ``gather`` touches the world.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil

from bir.core import config, credentials, installed
from bir.core.exits import EXIT_FAILED, EXIT_OK
from bir.core.off_switch import OffState, read_off
from bir.core.paths import resolve_project
from bir.core.printable import printable
from bir.core.urls import display_url
from bir.hooks import api
from bir.hooks.commands.probes import ControlFacts, ServiceCheck, check_service, control_facts
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.result import CHECK_EXIT_CODES, Subparsers, add_command, json_flag, project_flag, write_json
from bir.hooks.commands.switches import ReplayView, describe_allow, replay_view, server_log
from bir.hooks.commands.term import ago, paint, shown, wants_colour
from bir.hooks.discovery import Discovery, all_discoveries
from bir.hooks.local import store_summary, wants_local
from bir.hooks.wiring import Unwrapped, unwrapped_servers


@dataclass(frozen=True)
class StatusFacts:
    """Everything ``bir status`` shows, gathered once."""

    project: str
    replay: ReplayView
    down: bool
    off: OffState
    control: ControlFacts
    sign_in: credentials.Effective
    service: ServiceCheck
    log: str
    # The local service's store when it is the service in use (no service configured, or BIR_SERVICE=local).
    local: dict[str, Any] | None = None
    # The project's MCP servers no bir-proxy wraps (their scenarios steer instead of running direct).
    unwrapped: tuple[Unwrapped, ...] = ()


async def gather(project_dir: str | Path, settings: config.Settings | None = None) -> StatusFacts:
    """The facts of ``bir status`` for the project at ``project_dir``, by ``settings`` (read now when None).

    Raises:
        ConfigError: ``settings`` is None and a ``BIR_*`` variable holds an unusable value.
    """
    settings = settings if settings is not None else config.load()
    project = resolve_project(project_dir)
    switches = installed.project(project, settings.home)
    sign_in = credentials.effective(settings)
    return StatusFacts(
        project=str(project),
        replay=replay_view(project, settings),
        down=switches is not None and switches.down,
        off=read_off(settings.off, settings.home),
        control=await control_facts(project),
        sign_in=sign_in,
        service=await check_service(sign_in.url, sign_in.token, settings=settings),
        log=str(server_log(project)),
        local=await anyio.to_thread.run_sync(store_summary, settings) if wants_local(settings) else None,
        unwrapped=tuple(unwrapped_servers(project)) if switches is not None else (),
    )


@dataclass(frozen=True)
class Problem:
    """Something broken, and the command (or step) that fixes it."""

    what: str
    fix: str


def assess(facts: StatusFacts) -> list[Problem]:
    """What is broken in ``facts`` (an empty list: nothing is)."""
    problems: list[Problem] = []
    if facts.control.discovery is not None and facts.control.health is None:
        problems.append(
            Problem(
                f"the control server (pid {facts.control.discovery.pid}) does not answer: {facts.control.error}",
                f"bir down && bir up  (its log: {facts.log})",
            )
        )
    if facts.local is not None and facts.local.get("error"):
        problems.append(Problem(f"the local store cannot be used: {facts.local['error']}", "move the file aside"))
    if facts.local is not None:
        return problems
    if facts.service.verdict == "refused":
        problems.append(Problem(f"the service at {facts.service.url} refused the token", "bir login"))
    elif facts.service.verdict == "unexpected":
        problems.append(
            Problem(f"the service at {facts.service.url} answered oddly: {facts.service.detail}", "check BIR_AUTH_URL")
        )
    return problems


def _control_json(control: ControlFacts) -> dict[str, Any] | None:
    if control.discovery is None:
        return None
    found = control.discovery
    out: dict[str, Any] = {"pid": found.pid, "url": found.url, "version": found.version, "startedAt": found.started_at}
    if control.health is None:
        out["answering"] = False
        out["error"] = control.error
        return out
    health = control.health
    out.update(
        answering=True,
        uptimeMs=health.uptime_ms,
        replay=health.replay,
        wrapped=health.wrapped,
        served=health.served,
        left=health.left,
        service=health.service,
        serviceCoolingMs=health.service_cooling_ms,
        lastHello=None
        if health.last_hello is None
        else {
            "pid": health.last_hello.pid,
            "tools": health.last_hello.tools,
            "off": health.last_hello.off,
            "ageMs": health.last_hello.age_ms,
        },
    )
    return out


def render_json(facts: StatusFacts) -> dict[str, Any]:
    """``bir status --json``."""
    return {
        "project": facts.project,
        "installed": facts.replay.installed,
        "off": facts.off.off,
        "offBy": [name for name, on in (("BIR_OFF", facts.off.env), (facts.off.path, facts.off.file)) if on],
        "replay": facts.replay.to_json(),
        "down": facts.down,
        "controlServer": _control_json(facts.control),
        "service": {
            "kind": "local" if facts.local is not None else "remote",
            "local": facts.local,
            "url": None if facts.sign_in.url is None else display_url(facts.sign_in.url),
            "urlFrom": facts.sign_in.url_from,
            "tokenFrom": facts.sign_in.token_from,
            "check": facts.service.verdict,
            "detail": facts.service.detail,
        },
        "unwrapped": [{"name": u.name, "why": u.why, "fix": u.fix} for u in facts.unwrapped],
        "problems": [{"what": p.what, "fix": p.fix} for p in assess(facts)],
    }


def _local_line(local: dict[str, Any], colour: bool) -> str:
    if local.get("error"):
        return "service:  " + paint("local, store unusable", "red", colour) + f" — {local['error']}"
    used = f"{local.get('bytes', 0) / 2**20:.1f} of {local['limitBytes'] / 2**20:.0f} MB"
    said = f"{local.get('runs', 0)} runs, {local.get('ready', 0)} ready scenarios, {used}"
    return "service:  " + paint("local", "green", colour) + f" (on this machine) — {said} in {local['path']}"


def _service_line(facts: StatusFacts, colour: bool) -> str:
    if facts.local is not None:
        return _local_line(facts.local, colour)
    check = facts.service
    health = facts.control.health
    where = f"{check.url} (URL from {facts.sign_in.url_from}, token from {facts.sign_in.token_from})"
    if check.verdict == "unconfigured":
        return "service:  " + paint("signed out", "yellow", colour) + " — bir login --url URL"
    if health is not None and health.service == "cooling":
        return (
            "service:  "
            + paint("cooling down", "yellow", colour)
            + f" after a failure ({ago(health.service_cooling_ms or 0)} left); nothing waits on it. {where}"
        )
    words = {
        "accepted": paint("reachable, token accepted", "green", colour),
        "refused": paint("token refused", "red", colour) + " — bir login",
        "unreachable": paint("unreachable", "yellow", colour) + f" ({check.detail})",
        "unexpected": paint("answered oddly", "red", colour) + f" ({check.detail})",
    }
    return f"service:  {words[check.verdict]} — {where}"


def _proxy_state(name: str, health: api.Health, colour: bool) -> str:
    if name in health.served:
        return "live"
    if name in health.left:
        return "none (its session closed)"
    return paint("no proxy", "yellow", colour)


def _control_lines(facts: StatusFacts, colour: bool) -> list[str]:
    control = facts.control
    if control.discovery is None:
        if not facts.replay.installed:
            return ["control server: not running"]
        if facts.down:
            return ["control server: " + paint("down", "yellow", colour) + " (nothing revives it) — bir up"]
        return ["control server: not running (the next hook starts it, or: bir up)"]
    found = control.discovery
    health = control.health
    if health is None:
        return [f"control server: pid {found.pid} " + paint("not answering", "red", colour) + f" ({control.error})"]
    lines = [
        "control server: " + paint("up", "green", colour) + f" {ago(health.uptime_ms)}, pid {found.pid}, {found.url}"
    ]
    names = sorted(set(health.wrapped) | set(facts.replay.wrapped))
    if names:
        states = [f"{n} {_proxy_state(n, health, colour)}" for n in names]
        lines.append("proxies:  " + ", ".join(states))
    else:
        lines.append("proxies:  none registered yet (they start with a Claude Code session)")
    hello = health.last_hello
    if hello is None:
        lines.append("bir server: no hello yet (it says hello when a session starts it)")
    else:
        state = "off, lists no tools" if hello.off else f"lists {hello.tools} tool{'s' if hello.tools != 1 else ''}"
        lines.append(f"bir server: last hello {ago(hello.age_ms)} ago (pid {hello.pid}, {state})")
    return lines


def render_text(facts: StatusFacts, colour: bool = False) -> str:
    """``bir status`` for a person: one screen."""
    lines = [paint(f"bir status — {facts.project}", "bold", colour)]
    if facts.off.off:
        by = "BIR_OFF=1" if facts.off.env else facts.off.path
        lines.append(paint(f"bir is OFF ({by}): hooks answer {{}}, nothing replays", "yellow", colour) + " — bir on")
    if not facts.replay.installed:
        lines.append("installed: no — bir install (add --replay to turn replay on)")
    else:
        view = facts.replay
        replay = paint("ON", "bold", colour) if view.replay else "off"
        lines.append("installed: yes")
        lines.append(f"replay:   {replay}; bir may call by itself: {describe_allow(view.allow)}")
    lines += _control_lines(facts, colour)
    for server in facts.unwrapped:
        fix = f" — {server.fix}" if server.fix else ""
        lines.append(f"unwrapped: {server.name} ({server.why}): its scenarios steer, never run direct{fix}")
    lines.append(_service_line(facts, colour))
    for problem in assess(facts):
        lines.append(paint("problem: ", "red", colour) + f"{problem.what} — fix: {problem.fix}")
    return "\n".join(lines)


# -- bir status --all -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerRow:
    """One project's running control server, as ``bir status --all`` lists it."""

    discovery: Discovery
    uptime_ms: int
    rss_bytes: int | None  # the server and its children (the evaluator's workers); None: not readable
    workers: int

    def to_json(self) -> dict[str, Any]:
        found = self.discovery
        return {
            "project": found.project,
            "pid": found.pid,
            "url": found.url,
            "version": found.version,
            "uptimeMs": self.uptime_ms,
            "rssBytes": self.rss_bytes,
            "children": self.workers,
        }


def _memory(pid: int) -> tuple[int | None, int]:
    """The resident memory of ``pid`` and all its descendants, and how many descendants there are."""
    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)]
    except (psutil.Error, OSError):
        return None, 0
    total = 0
    for member in family:
        try:
            total += member.memory_info().rss
        except (psutil.Error, OSError):
            continue
    return total, len(family) - 1


def every_server(now_ms: int | None = None) -> list[ServerRow]:
    """Every project's live control server under ``BIR_HOME``, oldest first."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    rows = []
    for found in all_discoveries():
        rss, children = _memory(found.pid)
        rows.append(ServerRow(found, max(0, now - found.started_at), rss, children))
    return rows


def _megabytes(size: int | None) -> str:
    return "RSS unknown" if size is None else f"RSS {size / (1024 * 1024):.0f} MB"


def render_all(rows: list[ServerRow]) -> str:
    """``bir status --all`` for a person."""
    if not rows:
        return "No control server is running."
    total = sum(r.rss_bytes or 0 for r in rows)
    lines = [f"{len(rows)} control server{'s' if len(rows) != 1 else ''} running ({_megabytes(total)} in all):"]
    for row in rows:
        found = row.discovery
        lines.append(
            f"  {found.project}: pid {found.pid}, up {ago(row.uptime_ms)}, {_megabytes(row.rss_bytes)}"
            f" (with {row.workers} child process{'es' if row.workers != 1 else ''}), {found.url}"
        )
    lines.append("  To stop one: bir down --project DIR; all of them: bir down --all")
    return "\n".join(lines)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir status``."""
    cmd = add_command(
        sub,
        "status",
        "one screen: installed, replay, control server, proxies, the bir server, the service"
        " (--all: every project's control server)",
        ["bir status", "bir status --project ~/src/app --json", "bir status --all"],
        CHECK_EXIT_CODES,
    )
    project_flag(cmd)
    cmd.add_argument(
        "--all", action="store_true", help="every project's running control server, with its memory and uptime"
    )
    json_flag(cmd)
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir status``; 1 when something is broken."""
    if args.all:
        rows = every_server()
        if args.json:
            write_json({"servers": [row.to_json() for row in rows]}, sys.stdout)
        else:
            sys.stdout.write(printable(render_all(rows)) + "\n")
        return EXIT_OK
    with for_command(args) as progress:
        progress("asking the control server and the service…")
        facts = asyncio.run(gather(args.project, settings))
    broken = bool(assess(facts))
    if args.json:
        write_json(render_json(facts), sys.stdout)
    else:
        colour = wants_colour(sys.stdout)
        sys.stdout.write(shown(render_text(facts, colour), colour) + "\n")
    return EXIT_FAILED if broken else EXIT_OK
