"""The switches and the lifecycle (spec §13.2, §14, §16.5): ``bir replay status|on|off|allow``,
``bir off`` / ``bir on``, ``bir up`` / ``bir down``, ``bir login`` / ``bir logout``.

Each command returns an ``CommandResult``: sentences for a person and a plain object for ``--json``. A
refusal raises ``CommandError``, whose message says what to do next. The switches live where every
running process reads them at each use (``<BIR_HOME>/installed.json``, ``<BIR_HOME>/off``), so a
flip reaches a running control server and ``bir-scenario`` without a restart.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psutil

from bir.core import config, installed
from bir.core.exits import EXIT_USAGE
from bir.core.home_files import open_private, private_dir
from bir.core.log import logs_dir
from bir.core.paths import off_file, pid_alive, project_key, resolve_project, revive_stamp
from bir.core.revive import revive
from bir.hooks import api
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.result import (
    CommandError,
    CommandResult,
    Subparsers,
    add_command,
    json_flag,
    print_result,
    project_flag,
)
from bir.hooks.discovery import Discovery, all_discoveries, read_discovery, remove_discovery

# A control server starts its evaluator workers before it publishes itself; V8 takes a few seconds.
UP_WAIT_S: Final = 20.0
# SIGTERM answers parked polls and stops the pool: bounded at a few seconds by the server itself.
DOWN_WAIT_S: Final = 15.0
POLL_S: Final = 0.05
MAX_SERVER_NAME: Final = 256


def _installed_or_refuse(project: Path, what: str) -> installed.ProjectSwitches:
    switches = installed.project(project)
    if switches is None:
        raise CommandError(f"bir is not installed in {project}, so {what}: run `bir install --replay` there first")
    return switches


def _store(project: Path, **changes: Any) -> installed.ProjectSwitches:
    try:
        return installed.update(project, **changes)
    except installed.StoreError as exc:
        raise CommandError(f"{exc}; make {config.home()} writable and run this again") from exc


# -- bir replay status|on|off|allow ------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayView:
    """A project's replay switches as stored, and as the control server will read them."""

    project: str
    installed: bool
    stored_replay: bool
    stored_allow: tuple[str, ...] | None
    env_replay_off: bool
    env_allow: tuple[str, ...] | None
    bir_server: bool
    wrapped: tuple[str, ...]

    @property
    def replay(self) -> bool:
        return self.installed and self.stored_replay and not self.env_replay_off

    @property
    def allow(self) -> tuple[str, ...] | None:
        return self.env_allow if self.env_allow is not None else self.stored_allow

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "installed": self.installed,
            "replay": self.replay,
            "storedReplay": self.stored_replay,
            "replayOffByEnvironment": self.env_replay_off,
            "allow": None if self.allow is None else list(self.allow),
            "allowFrom": "environment" if self.env_allow is not None else "stored",
            "birServer": self.bir_server,
            "wrapped": list(self.wrapped),
        }


def wrapped_servers(switches: installed.ProjectSwitches | None) -> tuple[str, ...]:
    """The servers ``bir install`` put behind ``bir-proxy`` in the project (its record), without ``bir``."""
    if switches is None:
        return ()
    names = switches.install.get("localServers", [])
    return tuple(str(n) for n in names if isinstance(n, str) and n != api.BIR_SERVER) if isinstance(names, list) else ()


def replay_view(project: Path, settings: config.Settings) -> ReplayView:
    """The project's replay switches, read the way ``bir.hooks.session.switches.read_switches`` reads them."""
    switches = installed.project(project, settings.home)
    servers = switches.install.get("localServers", []) if switches is not None else []
    return ReplayView(
        project=str(project),
        installed=switches is not None,
        stored_replay=switches is not None and switches.replay,
        stored_allow=switches.allow if switches is not None else None,
        env_replay_off=settings.replay is False,
        env_allow=settings.replay_allow_servers,
        bir_server=isinstance(servers, list) and api.BIR_SERVER in servers,
        wrapped=wrapped_servers(switches),
    )


def describe_allow(allow: Sequence[str] | None) -> str:
    if allow is None:
        return "every wrapped server"
    return ", ".join(allow) if allow else "no server (bir calls nothing by itself)"


def replay_status(project_dir: str | os.PathLike[str], settings: config.Settings) -> CommandResult:
    """``bir replay status``: the project's switches in words."""
    view = replay_view(resolve_project(project_dir), settings)
    if not view.installed:
        text = f"bir is not installed in {view.project}: replay is off. To turn it on: bir install --replay"
        return CommandResult(text, view.to_json())
    lines = [f"Replay is {'ON' if view.replay else 'off'} in {view.project}."]
    if view.stored_replay and view.env_replay_off:
        lines.append("  Stored on, but BIR_REPLAY=0 in this environment keeps it off for what starts here.")
    lines.append(f"  bir may call by itself: {describe_allow(view.allow)}")
    if view.env_allow is not None:
        lines.append("  (from BIR_REPLAY_ALLOW_SERVERS, which wins over the stored allowlist)")
    if view.wrapped:
        lines.append(f"  Wrapped servers: {', '.join(view.wrapped)}")
    return CommandResult("\n".join(lines), view.to_json(), _replay_warnings(view))


def _replay_warnings(view: ReplayView) -> tuple[str, ...]:
    warnings: list[str] = []
    if view.replay and not view.bir_server:
        warnings.append(
            "the `bir` MCP server is not registered here, so direct plans are never offered: run `bir install --replay`"
        )
    if view.replay and view.allow is None:
        warnings.append(
            "replay is on with no allowlist: bir may call every wrapped server by itself. "
            "Narrow it: bir replay allow <server,server>"
        )
    unknown = [name for name in view.allow or () if name not in view.wrapped]
    if unknown and view.wrapped:
        warnings.append(f"not wrapped in this project (bir never calls them here): {', '.join(unknown)}")
    return tuple(warnings)


def refuse_unknown_servers(project: Path, allow: Sequence[str] | None, wrapped: Sequence[str]) -> None:
    """An allowlist naming a server bir does not wrap in the project is a typo until shown otherwise.

    Raises:
        CommandError: a name is not among ``wrapped`` (usage), with the names that are.
    """
    unknown = [name for name in allow or () if name not in wrapped]
    if not unknown:
        return
    names = ", ".join(repr(name) for name in unknown)
    if wrapped:
        known = ",".join(wrapped)
        where = f"its wrapped servers: {', '.join(wrapped)} (bir replay allow {known})"
    else:
        where = "bir wraps no server there yet: add the MCP servers to the project, then run `bir install`"
    raise CommandError(
        f"{names} {'is' if len(unknown) == 1 else 'are'} not a server bir wraps in {project}; {where}, "
        "or `bir replay allow all`",
        EXIT_USAGE,
        code="unknown_server",
    )


def replay_switch(project_dir: str | os.PathLike[str], on: bool, settings: config.Settings) -> CommandResult:
    """``bir replay on|off``: store the project's replay switch.

    Raises:
        CommandError: bir is not installed in the project, or the store cannot be written.
    """
    project = resolve_project(project_dir)
    _installed_or_refuse(project, f"there is no replay switch to turn {'on' if on else 'off'}")
    _store(project, replay=on)
    view = replay_view(project, settings)
    if on:
        text = f"Replay is ON in {project}: scenario steps may run without permission prompts."
        text += f"\n  bir may call by itself: {describe_allow(view.allow)}\n  To turn it off: bir replay off"
    else:
        text = (
            f"Replay is off in {project}: no scenario is replayed. Prompts are still matched, and one that matches"
            " nothing is still recorded. To turn it on: bir replay on"
        )
    if on and view.env_replay_off:
        text += "\n  BIR_REPLAY=0 in this environment still keeps it off for what starts here."
    return CommandResult(text, view.to_json(), _replay_warnings(view))


def parse_allow(spec: str) -> tuple[str, ...] | None:
    """``all`` → None (every wrapped server); ``a,b`` → ``("a", "b")``.

    Raises:
        CommandError: a name is empty, too long or has whitespace (usage).
    """
    if spec.strip().lower() == "all":
        return None
    names: list[str] = []
    for part in spec.split(","):
        name = part.strip()
        if not name or len(name) > MAX_SERVER_NAME or any(ch.isspace() for ch in name):
            raise CommandError(
                f"{part!r} is not a server name: give names separated by commas (bir replay allow fleet,github) "
                "or `all`",
                EXIT_USAGE,
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def replay_allow(project_dir: str | os.PathLike[str], spec: str, settings: config.Settings) -> CommandResult:
    """``bir replay allow <a,b>|all``: store the project's allowlist.

    Raises:
        CommandError: a bad list (usage), bir is not installed in the project, or the store cannot be written.
    """
    allow = parse_allow(spec)
    project = resolve_project(project_dir)
    switches = _installed_or_refuse(project, "there is no allowlist to set")
    refuse_unknown_servers(project, allow, wrapped_servers(switches))
    _store(project, allow=allow)
    view = replay_view(project, settings)
    text = f"bir may call by itself in {project}: {describe_allow(allow)}."
    if view.env_allow is not None:
        text += (
            f"\n  BIR_REPLAY_ALLOW_SERVERS in this environment wins for what starts here: {describe_allow(view.allow)}"
        )
    if not view.replay:
        text += "\n  Replay is off here, so nothing is called yet (bir replay on)."
    return CommandResult(text, view.to_json(), _replay_warnings(view))


# -- bir off / bir on ----------------------------------------------------------------------------------


def runner_off(settings: config.Settings) -> CommandResult:
    """``bir off``: write ``<BIR_HOME>/off``; hooks answer ``{}`` and the ``bir`` server lists no tools.

    Raises:
        CommandError: the file cannot be written.
    """
    path = off_file(settings.home)
    try:
        private_dir(path.parent)
        os.close(open_private(path, "append"))
    except OSError as exc:
        raise CommandError(
            f"cannot write {path}: {exc.strerror or exc}; set BIR_OFF=1 for a session instead, "
            f"or make {path.parent} writable"
        ) from exc
    text = (
        "bir is off everywhere: hooks answer {}, nothing is matched, armed or recorded, and the `bir` MCP server "
        "lists no tools (running sessions see it within a few seconds).\n  To turn it back on: bir on"
    )
    return CommandResult(text, {"off": True, "file": str(path)})


def runner_on(settings: config.Settings) -> CommandResult:
    """``bir on``: remove ``<BIR_HOME>/off``.

    Raises:
        CommandError: the file exists and cannot be removed.
    """
    path = off_file(settings.home)
    try:
        path.unlink()
        was_off = True
    except FileNotFoundError:
        was_off = False
    except OSError as exc:
        raise CommandError(f"cannot remove {path}: {exc.strerror or exc}; remove it by hand") from exc
    text = "bir is on again." if was_off else "bir was not off."
    warnings: tuple[str, ...] = ()
    if settings.off:
        warnings = ("BIR_OFF=1 in this environment still keeps bir off for what starts here: unset it",)
    return CommandResult(text, {"off": settings.off, "wasOff": was_off}, warnings)


# -- bir up / bir down ---------------------------------------------------------------------------------


def _wait(condition: Callable[[], bool], seconds: float) -> bool:
    until = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= until:
            return False
        time.sleep(POLL_S)
    return True


def server_log(project: Path) -> Path:
    """Where a revived control server of ``project`` logs."""
    return logs_dir(config.home()) / f"{project_key(project)}.log"


def _server_data(found: Discovery) -> dict[str, Any]:
    return {"pid": found.pid, "url": found.url, "startedAt": found.started_at, "version": found.version}


def bring_up(project_dir: str | os.PathLike[str], wait_s: float = UP_WAIT_S) -> CommandResult:
    """``bir up``: clear the project's ``down`` mark and start its control server detached, the way a
    hook revives it; wait until it publishes itself.

    Raises:
        CommandError: bir is not installed in the project, the server could not be started, or it did not
            come up within ``wait_s``.
    """
    project = resolve_project(project_dir)
    switches = _installed_or_refuse(project, "there is no control server to start")
    if switches.down:
        _store(project, down=False)
    found = read_discovery(project)
    if found is not None:
        text = f"The control server of {project} is already up (pid {found.pid}, {found.url})."
        return CommandResult(text, {"project": str(project), "started": False, "server": _server_data(found)})
    home = config.home()
    try:
        # A person asked: the hooks' once-per-10-s limit is not for them.
        revive_stamp(home, project).unlink(missing_ok=True)
        revive(home, project)
    except OSError as exc:
        raise CommandError(f"cannot start bir-hooks: {exc}; check that bir is installed (bir-hooks --help)") from exc
    box: list[Discovery] = []

    def published() -> bool:
        current = read_discovery(project)
        if current is not None:
            box.append(current)
        return current is not None

    if not _wait(published, wait_s):
        raise CommandError(
            f"the control server of {project} did not come up within {wait_s:.0f} s; "
            f"read {server_log(project)}, then run `bir up` again"
        )
    found = box[-1]
    text = f"The control server of {project} is up (pid {found.pid}, {found.url}).\n  To stop it: bir down"
    return CommandResult(text, {"project": str(project), "started": True, "server": _server_data(found)})


def is_control_server(pid: int) -> bool:
    """Whether ``pid`` runs ``bir-hooks`` (so a stale discovery file never gets another process signalled)."""
    try:
        words = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return False
    return any(Path(w).name == "bir-hooks" or w == "bir.hooks" for w in words)


def stop_server(project: Path, wait_s: float = DOWN_WAIT_S) -> Discovery | None:
    """Stop the control server of ``project`` (SIGTERM, wait up to ``wait_s``); the one that was stopped, or
    None when none was running. Nothing marks the project down here.

    Raises:
        CommandError: the server's pid is not a ``bir-hooks`` process, cannot be signalled, or outlived ``wait_s``.
    """
    found = read_discovery(project)
    if found is None:
        return None
    if not is_control_server(found.pid):
        raise CommandError(
            f"pid {found.pid} in the discovery file of {project} is not a bir-hooks process; nothing was signalled. "
            "If no control server is running, the file is stale: run `bir up` to replace it"
        )
    try:
        os.kill(found.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except OSError as exc:
        raise CommandError(
            f"cannot signal pid {found.pid}: {exc.strerror or exc}; stop it by hand (kill {found.pid})"
        ) from exc
    if not _wait(lambda: not pid_alive(found.pid), wait_s):
        raise CommandError(
            f"the control server (pid {found.pid}) is still running {wait_s:.0f} s after SIGTERM; "
            f"stop it with `kill -9 {found.pid}` and read {server_log(project)}"
        )
    # A server killed before it could tidy up leaves its file behind; it is ours to remove.
    remove_discovery(project, pid=found.pid)
    return found


def bring_down(project_dir: str | os.PathLike[str], wait_s: float = DOWN_WAIT_S) -> CommandResult:
    """``bir down``: mark the project down (no hook revives it until ``bir up`` or the next install),
    then stop its control server (SIGTERM, wait up to ``wait_s``).

    Raises:
        CommandError: the server's pid is not a ``bir-hooks`` process, cannot be signalled, or outlived ``wait_s``.
    """
    project = resolve_project(project_dir)
    switches = installed.project(project)
    if switches is not None and not switches.down:
        _store(project, down=True)
    after = (
        "Nothing revives it until `bir up` (or the next `bir install`)."
        if switches is not None
        else "bir is not installed here, so nothing revives it."
    )
    data: dict[str, Any] = {"project": str(project), "down": switches is not None, "stopped": False}
    found = stop_server(project, wait_s)
    if found is None:
        return CommandResult(f"No control server was running for {project}. {after}", data)
    data["stopped"] = True
    data["server"] = _server_data(found)
    return CommandResult(f"Stopped the control server of {project} (pid {found.pid}). {after}", data)


def bring_all_down(wait_s: float = DOWN_WAIT_S) -> CommandResult:
    """``bir down --all``: ``bir down`` for every project whose control server runs under ``BIR_HOME``.

    Raises:
        CommandError: one could not be stopped (the others were).
    """
    stopped: list[dict[str, Any]] = []
    failed: list[str] = []
    for found in all_discoveries():
        try:
            result = bring_down(found.project, wait_s)
        except CommandError as exc:
            failed.append(f"{found.project}: {exc}")
            continue
        stopped.append(dict(result.data))
    if failed:
        raise CommandError(
            f"stopped {len(stopped)} control server(s), but not: " + "; ".join(failed), code="not_stopped"
        )
    if not stopped:
        return CommandResult("No control server was running.", {"stopped": []})
    lines = [f"Stopped {len(stopped)} control server{'s' if len(stopped) != 1 else ''}:"]
    lines += [f"  {entry['project']} (pid {entry['server']['pid']})" for entry in stopped]
    lines.append("  Nothing revives them until `bir up` in each project (or its next `bir install`).")
    return CommandResult("\n".join(lines), {"stopped": stopped})


# -- the command line ------------------------------------------------------------------------------------

_COMMANDS: Final = (
    ("off", "take the whole runner out of the way: hooks answer {}, the bir server lists no tools", ["bir off"]),
    ("on", "undo `bir off`", ["bir on"]),
    ("up", "start this project's control server (and let hooks revive it again)", ["bir up --project ~/src/app"]),
    (
        "down",
        "stop this project's control server (--all: every project's); nothing revives it until `bir up`",
        ["bir down", "bir down --all"],
    ),
)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir off``, ``bir on``, ``bir up`` and ``bir down``."""
    for name, helptext, examples in _COMMANDS:
        cmd = add_command(sub, name, helptext, examples)
        if name in ("up", "down"):
            project_flag(cmd)
        if name == "down":
            cmd.add_argument("--all", action="store_true", help="every project's control server (see bir status --all)")
        json_flag(cmd)
        cmd.set_defaults(run=run)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir off|on|up|down``; answer its exit status.

    Raises:
        CommandError: refused (the message says what to do next).
    """
    if args.command == "off":
        result = runner_off(settings)
    elif args.command == "on":
        result = runner_on(settings)
    else:
        with for_command(args) as progress:
            if args.command == "up":
                progress("starting the control server (its evaluator takes a few seconds)…")
                result = bring_up(args.project)
            elif args.all:
                progress("stopping every control server…")
                result = bring_all_down()
            else:
                progress("stopping the control server…")
                result = bring_down(args.project)
    return print_result(result, args.json, sys.stdout)
