"""``bir install`` / ``bir uninstall``: wire bir into one project's Claude Code configuration.

Install writes three things, all personal (nothing a team commits is touched):

* the command hooks for seven events in ``<project>/.claude/settings.local.json``, with the hook
  timeouts of spec §10, never ``async`` (§7.3: a step's PostToolUse must finish before the next
  PreToolUse reads what it learned);
* a local-scope entry (``<config>/.claude.json`` → ``projects[<project>].mcpServers``) for every stdio
  MCP server the project uses, from ``.mcp.json``, the local scope and the user scope, that runs it
  behind ``bir-proxy`` under the same name (local wins over project and user, FACTS.md §4);
* with ``--replay``, the ``bir`` MCP server (``bir-scenario``), local scope, and the project's stored
  replay switch on (D14: without the flag replay is off and no extra tool rides along every request);
* with ``--replay --mcp-hooks``, PreToolUse, PostToolUse and PostToolUseFailure as ``mcp_tool`` hooks on
  the ``bir`` server (its unlisted ``hook`` tool, ``bir.proxy.hook_tool``) instead of ``bir-hook``
  commands: no process per tool call. The other four events stay commands (they revive the control
  server, and come once per turn). ``uninstall --replay`` puts the command hooks back with the server gone.

Every file is re-read right before it is written (Claude Code rewrites ``.claude.json`` while it
runs), only bir's keys are merged in, and it is replaced atomically keeping its mode. Each file is
copied to ``<BIR_HOME>/backups/<key>/<timestamp>/`` before it is changed, and the store records what
install created and replaced, so ``uninstall`` puts back exactly what was there: byte for byte when
nobody changed the file since, else by taking out only bir's entries.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bir.core import atomic, config, installed
from bir.core.exits import EXIT_FAILED, EXIT_OK
from bir.core.paths import backups_dir, resolve_project
from bir.hooks import api
from bir.hooks.commands import learn
from bir.hooks.commands.result import Subparsers, add_command, json_flag, project_flag

# Event → (hook timeout in seconds written for it, whether it takes a tool matcher): spec §10, from the
# control plane's one table of hook routes.
_TOOL_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
HOOK_EVENTS: Final[Mapping[str, tuple[int, bool]]] = {
    event: (route.timeout_s, event in _TOOL_EVENTS) for event, route in api.HOOK_ROUTES.items()
}
MAX_JSON_BYTES: Final = 64 * 1024 * 1024
_HOOK_SCRIPT = "bir-hook"
_PROXY_SCRIPT = "bir-proxy"
_SCENARIO_SCRIPT = "bir-scenario"


class InstallError(Exception):
    """Install or uninstall cannot go on; nothing was changed. The message is for a person."""


@dataclass(frozen=True)
class Executables:
    """Absolute paths of this installation's console scripts."""

    hook: Path
    proxy: Path
    scenario: Path


def find_executables(bin_dir: Path | None = None) -> Executables:
    """The console scripts beside ``sys.executable`` (the venv's ``bin/``), or in ``bin_dir``.

    Raises:
        InstallError: one of them is missing there.
    """
    folder = bin_dir if bin_dir is not None else Path(sys.executable).parent
    folder = folder.absolute()
    paths = [folder / name for name in (_HOOK_SCRIPT, _PROXY_SCRIPT, _SCENARIO_SCRIPT)]
    missing = [str(p) for p in paths if not (p.is_file() and os.access(p, os.X_OK))]
    if missing:
        raise InstallError(f"this installation has no {', '.join(missing)}: reinstall bir (pip install -e .)")
    return Executables(*paths)


def claude_config_file(env: Mapping[str, str] | None = None) -> Path:
    """The user's Claude Code config, ``$CLAUDE_CONFIG_DIR/.claude.json``, else ``$HOME/.claude.json``
    (checked against Claude Code 2.1.332's ``claude mcp add -s local|user``)."""
    env = os.environ if env is None else env
    folder = env.get("CLAUDE_CONFIG_DIR") or env.get("HOME") or str(Path.home())
    return Path(folder).expanduser() / ".claude.json"


def claude_settings_file(env: Mapping[str, str] | None = None) -> Path:
    """The user's Claude Code settings: ``$CLAUDE_CONFIG_DIR/settings.json``, else ``~/.claude/settings.json``."""
    env = os.environ if env is None else env
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / "settings.json"
    return Path(env.get("HOME") or str(Path.home())).expanduser() / ".claude" / "settings.json"


def _lenient_json(path: Path) -> dict[str, Any]:
    """A file bir only reads, never writes: one it cannot read counts as empty."""
    try:
        return read_json_file(path)[1]
    except InstallError:
        return {}


# -- recognising bir's own entries ------------------------------------------------------------------


def _script_name(command: object) -> str | None:
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return Path(words[0]).name if words else None


def is_mcp_hook(hook: object) -> bool:
    """Whether a hook entry is one ``bir install --mcp-hooks`` wrote (``mcp_tool`` on bir's ``hook`` tool)."""
    return (
        isinstance(hook, dict)
        and hook.get("type") == "mcp_tool"
        and hook.get("server") == api.MCP_HOOK_SERVER
        and hook.get("tool") == api.MCP_HOOK_TOOL
    )


def is_bir_hook(hook: object) -> bool:
    """Whether a hook entry is one ``bir install`` wrote: a command ``…/bir-hook EVENT``, or bir's ``mcp_tool``."""
    if is_mcp_hook(hook):
        return True
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    command = hook.get("command")
    if _script_name(command) != _HOOK_SCRIPT:
        return False
    words = shlex.split(str(command))
    return len(words) == 2 and words[1] in HOOK_EVENTS


def _is_bir_server(entry: object, script: str) -> bool:
    return isinstance(entry, dict) and Path(str(entry.get("command", ""))).name == script


def is_stdio(entry: Mapping[str, Any]) -> bool:
    """Whether an MCP server entry is a stdio server (no type means stdio when it has a command)."""
    kind = entry.get("type")
    return (kind is None or kind == "stdio") and isinstance(entry.get("command"), str) and "url" not in entry


# -- pure transformations ---------------------------------------------------------------------------


def hook_command(exes: Executables, event: str) -> str:
    return f"{shlex.quote(str(exes.hook))} {event}"


def mcp_hook(event: str) -> dict[str, Any]:
    """bir's ``mcp_tool`` hook for a tool event: every hook input field, interpolated, to bir's ``hook`` tool."""
    hook: dict[str, Any] = {"type": "mcp_tool", "server": api.MCP_HOOK_SERVER, "tool": api.MCP_HOOK_TOOL}
    return {**hook, "input": dict(api.MCP_HOOK_INPUT), "timeout": HOOK_EVENTS[event][0]}


def bir_hook(exes: Executables, event: str, *, mcp_hooks: bool = False) -> dict[str, Any]:
    """The hook entry install writes for ``event``."""
    if mcp_hooks and event in api.MCP_HOOK_EVENTS:
        return mcp_hook(event)
    return {"type": "command", "command": hook_command(exes, event), "timeout": HOOK_EVENTS[event][0]}


def merge_hooks(
    settings: Mapping[str, Any], exes: Executables, *, mcp_hooks: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """``settings`` with bir's hook for each event replaced in place (or appended), every other key,
    group and hook kept in order; and the events whose hook was added or changed. ``mcp_hooks``: the
    tool events get bir's ``mcp_tool`` hook instead of the command.

    Raises:
        InstallError: ``hooks`` or an event's list is not the shape Claude Code reads.
    """
    result = dict(settings)
    hooks = result.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError('"hooks" is not an object')
    hooks = dict(hooks)
    changed: list[str] = []
    for event, (_, tool_event) in HOOK_EVENTS.items():
        ours = bir_hook(exes, event, mcp_hooks=mcp_hooks)
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise InstallError(f'"hooks.{event}" is not a list')
        new_groups: list[Any] = []
        placed = False
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_bir_hook(h) for h in inner):
                new_groups.append(group)
                continue
            kept: list[Any] = []
            for hook in inner:
                if not is_bir_hook(hook):
                    kept.append(hook)
                elif not placed:
                    kept.append(ours)
                    placed = True
            if kept:
                new_groups.append({**group, "hooks": kept})
        if not placed:
            group_new: dict[str, Any] = {"matcher": "*"} if tool_event else {}
            group_new["hooks"] = [ours]
            new_groups.append(group_new)
        if new_groups != groups:
            changed.append(event)
        hooks[event] = new_groups
    result["hooks"] = hooks
    return result, changed


def strip_hooks(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without bir's hooks; a group, event list or ``hooks`` left empty goes too."""
    result = dict(settings)
    hooks = result.get("hooks")
    if not isinstance(hooks, dict):
        return result
    new_hooks: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            new_hooks[event] = groups
            continue
        new_groups: list[Any] = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(is_bir_hook(h) for h in inner):
                kept = [h for h in inner if not is_bir_hook(h)]
                if kept:
                    new_groups.append({**group, "hooks": kept})
            else:
                new_groups.append(group)
        if new_groups or not groups:
            new_hooks[event] = new_groups
    if new_hooks or not hooks:
        result["hooks"] = new_hooks
    else:
        del result["hooks"]
    return result


def wrap_entry(name: str, entry: Mapping[str, Any], exes: Executables) -> dict[str, Any]:
    """A stdio server's local-scope entry running it behind ``bir-proxy`` under its own name; keys
    other than type, command, args and env (``alwaysLoad``, …) are kept."""
    args = entry.get("args") or []
    env = entry.get("env") or {}
    wrapped: dict[str, Any] = {
        "type": "stdio",
        "command": str(exes.proxy),
        "args": ["--server-name", name, "--", entry["command"], *[str(a) for a in args]],
        "env": dict(env),
    }
    for key, value in entry.items():
        if key not in ("type", "command", "args", "env"):
            wrapped[key] = value
    return wrapped


def scenario_entry(exes: Executables) -> dict[str, Any]:
    return {"type": "stdio", "command": str(exes.scenario), "args": [], "env": {}}


@dataclass
class ServerPlan:
    """What install does to the MCP servers: local entries to write, names left alone and why."""

    local: dict[str, dict[str, Any]] = field(default_factory=dict)
    wrapped: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class McpjsonApproval:
    """Which of the project's ``.mcp.json`` servers the user approved in Claude Code.

    A local-scope entry runs without Claude Code's approval prompt for project servers, so bir wraps
    only servers the user already approved: wrapping one would otherwise approve it on their behalf.
    """

    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()
    all_enabled: bool = False

    def approved(self, name: str) -> bool:
        return name not in self.disabled and (self.all_enabled or name in self.enabled)


def read_approval(*docs: Mapping[str, Any]) -> McpjsonApproval:
    """The approval from the documents that carry it (the project's entry in ``.claude.json`` and the
    settings files): ``enabledMcpjsonServers``, ``disabledMcpjsonServers``, ``enableAllProjectMcpServers``."""
    enabled: set[str] = set()
    disabled: set[str] = set()
    all_enabled = False
    for doc in docs:
        for key, into in (("enabledMcpjsonServers", enabled), ("disabledMcpjsonServers", disabled)):
            names = doc.get(key)
            if isinstance(names, list):
                into.update(str(n) for n in names)
        all_enabled = all_enabled or doc.get("enableAllProjectMcpServers") is True
    return McpjsonApproval(frozenset(enabled), frozenset(disabled), all_enabled)


def plan_servers(
    project_servers: Mapping[str, Any],
    local_servers: Mapping[str, Any],
    user_servers: Mapping[str, Any],
    approval: McpjsonApproval,
    exes: Executables,
    *,
    replay: bool,
) -> ServerPlan:
    """The local-scope entries bir wants for the servers the project sees (local wins over project,
    project over user)."""
    plan = ServerPlan()
    effective: dict[str, Any] = {}
    approved = {k: v for k, v in project_servers.items() if approval.approved(k)}
    for scope in (user_servers, approved, local_servers):
        effective.update(scope)
    for name, entry in effective.items():
        if name == api.BIR_SERVER:
            continue
        if not isinstance(entry, dict):
            plan.skipped[name] = "not a server entry"
        elif _is_bir_server(entry, _PROXY_SCRIPT):
            # Already behind bir-proxy (bir's own earlier install, or the user's): not wrapped twice.
            if name in local_servers:
                plan.local[name] = entry
            plan.wrapped.append(name)
        elif not is_stdio(entry):
            plan.skipped[name] = f"{entry.get('type') or 'remote'} server: not wrapped"
        else:
            plan.local[name] = wrap_entry(name, entry, exes)
            plan.wrapped.append(name)
    for name in project_servers:
        if name in approved or name in local_servers or name == api.BIR_SERVER:
            continue
        plan.skipped[name] = (
            "disabled for this project"
            if name in approval.disabled
            else "a .mcp.json server not approved in Claude Code yet: approve it, then run bir install again"
        )
    if replay:
        plan.local[api.BIR_SERVER] = scenario_entry(exes)
    return plan


# -- files ------------------------------------------------------------------------------------------


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_json_file(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    """The file's bytes (None if absent) and its object ({} if absent).

    Raises:
        InstallError: it cannot be read, is too large, is not JSON or not a JSON object.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_JSON_BYTES:
        raise InstallError(f"{path} is larger than {MAX_JSON_BYTES} bytes; left unchanged")
    try:
        parsed = json.loads(data) if data.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise InstallError(
            f"{path} is not valid JSON ({exc}); fix it and run this again. Nothing was changed."
        ) from None
    if not isinstance(parsed, dict):
        raise InstallError(f"{path} does not hold a JSON object; fix it, then run this again. Nothing was changed.")
    return data, parsed


def render_json(value: Mapping[str, Any], like: bytes | None) -> bytes:
    """Two-space JSON, ending in a newline only if the file it replaces did (Claude Code writes none)."""
    text = json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")
    return text + b"\n" if like is None or like.endswith(b"\n") else text


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` through a temp file beside it, keeping its mode (else ``mode``, else 0600).

    Raises:
        OSError: the file cannot be written.
    """
    try:
        keep = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        keep = 0o600 if mode is None else mode
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_atomic(path, data, mode=keep)


def _backup(path: Path, data: bytes, folder: Path) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = folder / path.name
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return target


def _local_servers(config_doc: Mapping[str, Any], project: Path) -> dict[str, Any]:
    projects = config_doc.get("projects")
    entry = projects.get(str(project)) if isinstance(projects, dict) else None
    servers = entry.get("mcpServers") if isinstance(entry, dict) else None
    return dict(servers) if isinstance(servers, dict) else {}


def _with_local_servers(config_doc: Mapping[str, Any], project: Path, servers: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(config_doc)
    projects = result.get("projects")
    projects = dict(projects) if isinstance(projects, dict) else {}
    entry = projects.get(str(project))
    entry = dict(entry) if isinstance(entry, dict) else {}
    entry["mcpServers"] = dict(servers)
    projects[str(project)] = entry
    result["projects"] = projects
    return result


def _servers_of(doc: Mapping[str, Any], where: Path, key: str = "mcpServers") -> dict[str, Any]:
    servers = doc.get(key, {})
    if not isinstance(servers, dict):
        raise InstallError(f'"{key}" in {where} is not an object; left unchanged')
    return dict(servers)


# -- install / uninstall ----------------------------------------------------------------------------


@dataclass
class Change:
    """What a command did, for people and for ``--json``."""

    project: str
    action: str
    replay: bool
    files_changed: list[str] = field(default_factory=list)
    files_created: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    servers_wrapped: list[str] = field(default_factory=list)
    servers_left: dict[str, str] = field(default_factory=dict)
    servers_restored: list[str] = field(default_factory=list)
    bir_server: bool = False
    mcp_hooks: bool = False
    backup_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "action": self.action,
            "replay": self.replay,
            "filesChanged": self.files_changed,
            "filesCreated": self.files_created,
            "filesRemoved": self.files_removed,
            "hooks": self.hooks,
            "serversWrapped": self.servers_wrapped,
            "serversLeftAlone": self.servers_left,
            "serversRestored": self.servers_restored,
            "birServer": self.bir_server,
            "mcpHooks": self.mcp_hooks,
            "backupDir": self.backup_dir,
        }


class _Writer:
    """Writes a file only if its bytes change, taking the backup first and keeping the file record."""

    def __init__(self, project: Path, record: dict[str, Any], change: Change, home: Path) -> None:
        self._folder = backups_dir(home, project) / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._folder = self._folder.with_name(f"{self._folder.name}.{int(time.time() * 1000) % 1000:03d}")
        self.files: dict[str, Any] = dict(record.get("files", {}))
        self.change = change

    def write(self, path: Path, transform: Callable[[dict[str, Any]], dict[str, Any]], mode: int = 0o600) -> None:
        # Read again right before writing: Claude Code may have rewritten the file since.
        before, doc = read_json_file(path)
        after = render_json(transform(doc), before)
        if before is not None and after == before:
            return
        key = str(path)
        known = self.files.get(key)
        backup = None
        if before is not None:
            backup = str(_backup(path, before, self._folder))
            self.change.backup_dir = str(self._folder)
        write_atomic(path, after, mode)
        if known is None:
            self.files[key] = {"created": before is None, "backup": backup, "exact": True, "sha256": _digest(after)}
        else:
            # Changed again after the first install: its first backup no longer holds what a byte-for-byte
            # restore would need, so uninstall takes bir's entries out instead.
            exact = bool(known.get("exact", True)) and known.get("sha256") == _digest(before or b"")
            self.files[key] = {**known, "exact": exact, "sha256": _digest(after)}
        (self.change.files_created if before is None else self.change.files_changed).append(key)


def install(
    project_dir: str | os.PathLike[str],
    *,
    replay: bool,
    exes: Executables,
    mcp_hooks: bool = False,
    env: Mapping[str, str] | None = None,
) -> Change:
    """Install bir in the project (idempotent); see the module's docstring.

    Raises:
        InstallError: a file is not valid JSON or not the expected shape (nothing changed), one
            cannot be written, or ``mcp_hooks`` without ``replay`` (the hooks need the ``bir`` server).
    """
    if mcp_hooks and not replay:
        raise InstallError("--mcp-hooks needs --replay: the hooks are answered by the `bir` MCP server")
    project = resolve_project(project_dir)
    if not project.is_dir():
        raise InstallError(f"{project} is not a directory")
    home = config.home(env)
    settings_path = project / ".claude" / "settings.local.json"
    mcp_path = project / ".mcp.json"
    user_path = claude_config_file(env)
    # Read every file first: one that is not valid JSON stops the install before anything changes.
    _, settings_doc = read_json_file(settings_path)
    merge_hooks(settings_doc, exes, mcp_hooks=mcp_hooks)
    _, mcp_doc = read_json_file(mcp_path)
    _, config_doc = read_json_file(user_path)
    project_servers = _servers_of(mcp_doc, mcp_path)
    user_servers = _servers_of(config_doc, user_path)
    local_before = _local_servers(config_doc, project)
    projects_doc = config_doc.get("projects")
    project_doc = projects_doc.get(str(project)) if isinstance(projects_doc, dict) else None
    approval = read_approval(
        project_doc if isinstance(project_doc, dict) else {},
        settings_doc,
        _lenient_json(project / ".claude" / "settings.json"),
        _lenient_json(claude_settings_file(env)),
    )

    stored = installed.project(project, home)
    record: dict[str, Any] = dict(stored.install) if stored is not None else {}
    change = Change(project=str(project), action="install", replay=replay)
    plan = plan_servers(project_servers, local_before, user_servers, approval, exes, replay=replay)
    # Local entries that were there before bir's, by name: uninstall puts them back.
    previous: dict[str, Any] = dict(record.get("previousLocal", {}))
    owned: list[str] = list(record.get("localServers", []))
    for name, entry in plan.local.items():
        if name not in owned and local_before.get(name) != entry:
            owned.append(name)
            if name in local_before:
                previous[name] = local_before[name]
    drop_bir = not replay and api.BIR_SERVER in owned

    writer = _Writer(project, record, change, home)
    created_claude_dir = not settings_path.parent.exists()
    try:
        writer.write(settings_path, lambda doc: merge_hooks(doc, exes, mcp_hooks=mcp_hooks)[0], mode=0o644)

        def servers(doc: dict[str, Any]) -> dict[str, Any]:
            local = _local_servers(doc, project)
            for name, entry in plan.local.items():
                local[name] = entry
            if drop_bir:
                _restore_local(local, api.BIR_SERVER, previous)
            return _with_local_servers(doc, project, local)

        writer.write(user_path, servers, mode=0o600)
    except OSError as exc:
        raise InstallError(f"cannot write: {exc}") from exc
    if drop_bir:
        owned.remove(api.BIR_SERVER)
        previous.pop(api.BIR_SERVER, None)
    change.hooks = list(HOOK_EVENTS)
    change.servers_wrapped = plan.wrapped
    change.servers_left = plan.skipped
    change.bir_server = replay
    change.mcp_hooks = mcp_hooks
    new_record = {
        **record,
        "mcpHooks": mcp_hooks,
        "files": writer.files,
        "localServers": owned,
        "previousLocal": previous,
        "createdClaudeDir": record.get("createdClaudeDir", created_claude_dir),
    }
    try:
        installed.update(project, home, replay=replay, down=False, install=new_record)
    except installed.StoreError as exc:
        raise InstallError(str(exc)) from exc
    return change


def _restore_local(local: dict[str, Any], name: str, previous: Mapping[str, Any]) -> bool:
    """Put back the entry ``name`` had before bir, or drop bir's; True if something changed."""
    current = local.get(name)
    if current is None:
        return False
    if not (_is_bir_server(current, _PROXY_SCRIPT) or _is_bir_server(current, _SCENARIO_SCRIPT)):
        return False  # someone replaced bir's entry since: theirs stays
    if name in previous:
        local[name] = previous[name]
    else:
        del local[name]
    return True


def _put_back(
    path: Path,
    entry: Mapping[str, Any] | None,
    strip: Callable[[dict[str, Any]], dict[str, Any]],
    change: Change,
) -> None:
    before, doc = read_json_file(path)
    if before is None:
        return
    exact = entry is not None and entry.get("exact") and entry.get("sha256") == _digest(before)
    if exact and entry is not None and entry.get("created"):
        path.unlink()
        change.files_removed.append(str(path))
        return
    if exact and entry is not None and entry.get("backup"):
        with contextlib.suppress(OSError):
            write_atomic(path, Path(entry["backup"]).read_bytes())
            change.files_changed.append(str(path))
            return
    stripped = strip(doc)
    if entry is not None and entry.get("created") and not stripped:
        path.unlink()
        change.files_removed.append(str(path))
        return
    after = render_json(stripped, before)
    if after != before:
        write_atomic(path, after)
        change.files_changed.append(str(path))


def uninstall(
    project_dir: str | os.PathLike[str],
    *,
    replay_only: bool = False,
    env: Mapping[str, str] | None = None,
    exes: Executables | None = None,
) -> Change:
    """Take bir out of the project: restore what install changed (``replay_only``: only the ``bir``
    server, and replay off; ``mcp_tool`` hooks on it become ``bir-hook`` commands of ``exes``, by
    default this installation's).

    Raises:
        InstallError: a file is not valid JSON (nothing changed), one cannot be written, bir is
            not installed in the project, or its ``mcp_tool`` hooks need this installation's
            ``bir-hook`` and it has none.
    """
    project = resolve_project(project_dir)
    home = config.home(env)
    stored = installed.project(project, home)
    if stored is None:
        raise InstallError(f"bir is not installed in {project}")
    record = dict(stored.install)
    files = dict(record.get("files", {}))
    owned = [str(n) for n in record.get("localServers", [])]
    previous = dict(record.get("previousLocal", {}))
    settings_path = project / ".claude" / "settings.local.json"
    user_path = claude_config_file(env)
    _, settings_doc = read_json_file(settings_path)
    read_json_file(user_path)
    change = Change(project=str(project), action="uninstall --replay" if replay_only else "uninstall", replay=False)
    names = [api.BIR_SERVER] if replay_only else owned

    def strip_servers(doc: dict[str, Any]) -> dict[str, Any]:
        local = _local_servers(doc, project)
        restored = [name for name in names if _restore_local(local, name, previous)]
        change.servers_restored = [n for n in restored if n in previous]
        if not restored:
            return doc
        return _with_local_servers(doc, project, local)

    try:
        if replay_only:
            before, doc = read_json_file(user_path)
            if before is not None:
                after = render_json(strip_servers(doc), before)
                if after != before:
                    write_atomic(path=user_path, data=after)
                    change.files_changed.append(str(user_path))
            if _has_mcp_hooks(settings_doc):
                _commands_for_mcp_hooks(settings_path, exes or find_executables(), files, change)
            owned = [n for n in owned if n != api.BIR_SERVER]
            previous.pop(api.BIR_SERVER, None)
            # bir's own write to .claude.json no longer matches a byte-for-byte restore.
            if str(user_path) in files:
                files[str(user_path)] = {**files[str(user_path)], "exact": False}
            new_record = {
                **record,
                "files": files,
                "localServers": owned,
                "previousLocal": previous,
                "mcpHooks": False,
            }
            installed.update(project, home, replay=False, install=new_record)
            return change
        _put_back(settings_path, files.get(str(settings_path)), strip_hooks, change)
        if record.get("createdClaudeDir"):
            with contextlib.suppress(OSError):
                settings_path.parent.rmdir()  # only if empty
        _put_back(user_path, files.get(str(user_path)), strip_servers, change)
        installed.remove(project, home)
    except OSError as exc:
        raise InstallError(f"cannot write: {exc}") from exc
    change.hooks = list(HOOK_EVENTS)
    return change


def _has_mcp_hooks(settings: Mapping[str, Any]) -> bool:
    hooks = settings.get("hooks")
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(is_mcp_hook(h) for h in inner):
                return True
    return False


def _commands_for_mcp_hooks(settings_path: Path, exes: Executables, files: dict[str, Any], change: Change) -> None:
    """Turn bir's ``mcp_tool`` hooks back into ``bir-hook`` commands (the ``bir`` server is going away)."""
    before, doc = read_json_file(settings_path)
    after = render_json(merge_hooks(doc, exes)[0], before)
    if after == before:
        return
    write_atomic(settings_path, after)
    change.files_changed.append(str(settings_path))
    if str(settings_path) in files:
        # A later full uninstall restores the backup only while the file is as install left it.
        files[str(settings_path)] = {**files[str(settings_path)], "sha256": _digest(after)}


def describe(change: Change) -> str:
    """What ``change`` did, in sentences."""
    lines: list[str] = []
    if change.action == "install":
        lines.append(f"bir is installed in {change.project}.")
        for path in change.files_created:
            lines.append(f"  created {path}")
        for path in change.files_changed:
            lines.append(f"  changed {path}")
        if not change.files_created and not change.files_changed:
            lines.append("  Nothing needed changing: it was already installed this way.")
        if change.mcp_hooks:
            commands = [e for e in change.hooks if e not in api.MCP_HOOK_EVENTS]
            lines.append(f"  Hooks for {', '.join(commands)} run {_HOOK_SCRIPT} (in .claude/settings.local.json).")
            lines.append(
                f"  Hooks for {', '.join(api.MCP_HOOK_EVENTS)} are mcp_tool hooks on the `bir` MCP server "
                "(no process per tool call)."
            )
        else:
            lines.append(f"  Hooks for {', '.join(change.hooks)} run {_HOOK_SCRIPT} (in .claude/settings.local.json).")
        if change.servers_wrapped:
            lines.append(f"  MCP servers behind bir-proxy (local scope): {', '.join(change.servers_wrapped)}.")
        for name, why in change.servers_left.items():
            lines.append(f"  Left alone: {name} ({why}).")
        lines.append(
            "  Replay is ON: the `bir` MCP server is registered, and scenario steps may run without permission prompts."
            if change.replay
            else "  Replay is off (run `bir install --replay` to turn it on)."
        )
        if change.backup_dir:
            lines.append(f"  Backups of the changed files: {change.backup_dir}")
        lines.append("  To undo all of it: bir uninstall")
        return "\n".join(lines)
    if change.action == "uninstall --replay":
        lines.append(
            f"Replay is off in {change.project} and the `bir` MCP server is taken out; the rest of the install stays."
        )
    else:
        lines.append(f"bir is uninstalled from {change.project}.")
    for path in change.files_changed:
        lines.append(f"  restored {path}")
    for path in change.files_removed:
        lines.append(f"  removed {path} (install had created it)")
    if change.servers_restored:
        lines.append(f"  Local-scope servers put back as they were: {', '.join(change.servers_restored)}.")
    return "\n".join(lines)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir install`` and ``bir uninstall``."""
    for name, helptext, replay_help, examples in (
        (
            "install",
            "wire bir into a project's Claude Code hooks and MCP servers",
            "also turn replay on",
            ["bir install --replay", "bir install --project ~/src/app --json"],
        ),
        (
            "uninstall",
            "take bir out of a project, restoring what install changed",
            "only turn replay off",
            ["bir uninstall", "bir uninstall --replay"],
        ),
    ):
        cmd = add_command(sub, name, helptext, examples)
        cmd.add_argument("--replay", action="store_true", help=replay_help)
        if name == "install":
            cmd.add_argument(
                "--mcp-hooks",
                action="store_true",
                help="with --replay: answer the tool events' hooks in the bir MCP server (mcp_tool hooks), "
                "no process per tool call",
            )
            cmd.add_argument(
                "--learn", action="store_true", help="then learn from the project's past sessions (bir learn)"
            )
        project_flag(cmd)
        json_flag(cmd, "print one JSON document describing what changed")
        cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``bir install`` or ``bir uninstall``."""
    try:
        if args.command == "install":
            change = install(args.project, replay=args.replay, exes=find_executables(), mcp_hooks=args.mcp_hooks)
        else:
            change = uninstall(args.project, replay_only=args.replay)
    except InstallError as exc:
        sys.stderr.write(f"bir {args.command}: {exc}\n")
        return EXIT_FAILED
    if args.command != "install":
        text = json.dumps(change.to_json(), indent=2) if args.json else describe(change)
        sys.stdout.write(text + "\n")
        return EXIT_OK
    if not args.json:
        sys.stdout.write(describe(change) + "\n")
    # bir install offers to learn from the project's past sessions (asks on a terminal; --learn for scripts).
    learned = learn.offer(resolve_project(args.project), forced=args.learn, as_json=args.json)
    if args.json:
        extra = {} if learned is None else {"learned": learned}
        sys.stdout.write(json.dumps({**change.to_json(), **extra}, indent=2) + "\n")
    return EXIT_OK
