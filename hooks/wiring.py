"""What ``bir install`` writes into a project's Claude Code configuration, and takes back out.

Install writes, all personal (nothing a team commits is touched):

* the hooks for seven events in ``<project>/.claude/settings.local.json``, with the hook timeouts of
  spec §10, never ``async`` (§7.3: a step's PostToolUse must finish before the next PreToolUse reads what
  it learned). By default PreToolUse, PostToolUse and PostToolUseFailure are ``mcp_tool`` hooks on the
  ``bir`` server's unlisted ``hook`` tool (``bir.proxy.hook_tool``): no process per tool call. The other
  four events are ``bir-hook`` commands (they revive the control server, and come once per turn).
  ``command_hooks`` makes the tool events ``bir-hook`` commands too (a process per call, as before);
* the ``bir`` MCP server (``bir-scenario``), local scope, always: it carries the tool events' hooks, and
  lists ``run_scenario`` only while replay is on (D14: without replay no extra tool rides along a request);
* a local-scope entry (``<config>/.claude.json`` → ``projects[<project>].mcpServers``) for every stdio
  MCP server the project uses, from ``.mcp.json``, the local scope and the user scope, that runs it
  behind ``bir-proxy`` under the same name (local wins over project and user, FACTS.md §4);
* for a ``.mcp.json`` server Claude Code has not approved yet, only when the user says so (``approve``):
  its name in ``enabledMcpjsonServers`` of ``settings.local.json``, where Claude Code 2.1.197 and 2.1.332
  record the approval their dialog asks for (observed: a local-scope entry runs without that dialog, so a
  server is wrapped only once approved, and bir records the approval it was given where Claude Code, ``bir
  status`` and ``bir uninstall`` all read it);
* with ``replay``, the project's stored replay switch on.

Every file is re-read right before it is written (Claude Code rewrites ``.claude.json`` while it
runs), only bir's keys are merged in, and it is replaced atomically keeping its mode. Each file is
copied to ``<BIR_HOME>/backups/<key>/<timestamp>/`` before it is changed, and the store records what
install created, replaced and approved, so ``uninstall`` puts back exactly what was there: byte for byte
when nobody changed the file since, else by taking out only bir's entries (and only the approvals bir added).

``wrap_approved`` is the same for servers approved after the install (the control server runs it at
``SessionStart``): it wraps them for the next session and touches nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from bir.core import atomic, config, installed
from bir.core.home_files import open_private, private_dir
from bir.core.paths import backups_dir, resolve_project
from bir.hooks import api

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
# Where Claude Code records the user's answer to its "New MCP server found" dialog (settings.local.json).
ENABLED_KEY: Final = "enabledMcpjsonServers"
DISABLED_KEY: Final = "disabledMcpjsonServers"
ALL_KEY: Final = "enableAllProjectMcpServers"

HookStyle = Literal["mcp_tool", "command"]
# Which unapproved ``.mcp.json`` servers this install approves: some by name, or all of them.
Approve = frozenset[str] | Literal["all"]


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
    """Whether a hook entry is bir's ``mcp_tool`` hook (on the ``bir`` server's ``hook`` tool)."""
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


def command_line(entry: Mapping[str, Any]) -> str:
    """A server entry's command line as a shell would show it (what the user is asked to approve)."""
    args = entry.get("args")
    words = [str(entry.get("command", "")), *(str(a) for a in args)] if isinstance(args, list) else []
    return shlex.join(words) if words else str(entry.get("command", ""))


# -- pure transformations ---------------------------------------------------------------------------


def hook_command(exes: Executables, event: str) -> str:
    return f"{shlex.quote(str(exes.hook))} {event}"


def mcp_hook(event: str) -> dict[str, Any]:
    """bir's ``mcp_tool`` hook for a tool event: every hook input field, interpolated, to bir's ``hook`` tool."""
    hook: dict[str, Any] = {"type": "mcp_tool", "server": api.MCP_HOOK_SERVER, "tool": api.MCP_HOOK_TOOL}
    return {**hook, "input": dict(api.MCP_HOOK_INPUT), "timeout": HOOK_EVENTS[event][0]}


def bir_hook(exes: Executables, event: str, *, style: HookStyle = "mcp_tool") -> dict[str, Any]:
    """The hook entry install writes for ``event``."""
    if style == "mcp_tool" and event in api.MCP_HOOK_EVENTS:
        return mcp_hook(event)
    return {"type": "command", "command": hook_command(exes, event), "timeout": HOOK_EVENTS[event][0]}


def merge_hooks(
    settings: Mapping[str, Any], exes: Executables, *, style: HookStyle = "mcp_tool"
) -> tuple[dict[str, Any], list[str]]:
    """``settings`` with bir's hook for each event replaced in place (or appended), every other key,
    group and hook kept in order; and the events whose hook was added or changed.

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
        ours = bir_hook(exes, event, style=style)
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


def with_approvals(settings: Mapping[str, Any], names: Collection[str]) -> dict[str, Any]:
    """``settings`` with ``names`` added to ``enabledMcpjsonServers`` (as Claude Code's dialog adds them).

    Raises:
        InstallError: the key holds something other than a list.
    """
    result = dict(settings)
    if not names:
        return result
    enabled = result.get(ENABLED_KEY, [])
    if not isinstance(enabled, list):
        raise InstallError(f'"{ENABLED_KEY}" is not a list')
    result[ENABLED_KEY] = [*enabled, *(n for n in names if n not in enabled)]
    return result


def strip_approvals(settings: Mapping[str, Any], names: Collection[str], *, key_created: bool) -> dict[str, Any]:
    """``settings`` without the approvals bir added; the key goes too when bir created it and it is empty."""
    result = dict(settings)
    enabled = result.get(ENABLED_KEY)
    if not names or not isinstance(enabled, list):
        return result
    kept = [n for n in enabled if n not in names]
    if kept or not key_created:
        result[ENABLED_KEY] = kept
    else:
        del result[ENABLED_KEY]
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
    """What install does to the MCP servers: local entries to write, names left alone and why.

    ``unapproved``: the ``.mcp.json`` stdio servers Claude Code has not approved and this install was not
    told to approve (name → command line); ``approved``: those it approves now (recorded in
    ``enabledMcpjsonServers``); ``rejected``: those the user turned down in Claude Code.
    """

    local: dict[str, dict[str, Any]] = field(default_factory=dict)
    wrapped: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    unapproved: dict[str, str] = field(default_factory=dict)
    approved: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class McpjsonApproval:
    """Which of the project's ``.mcp.json`` servers the user approved in Claude Code.

    A local-scope entry runs without Claude Code's approval dialog for project servers (observed on
    2.1.197 and 2.1.332), so bir wraps a server only once it is approved: by the user in Claude Code, or
    by the user through ``bir install`` (which records it where Claude Code does).
    """

    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()
    all_enabled: bool = False

    def approved(self, name: str) -> bool:
        return name not in self.disabled and (self.all_enabled or name in self.enabled)


def read_approval(*docs: Mapping[str, Any]) -> McpjsonApproval:
    """The approval from the documents that carry it (the project's entry in ``.claude.json``, where older
    Claude Code versions kept it, and the settings files): ``enabledMcpjsonServers``,
    ``disabledMcpjsonServers``, ``enableAllProjectMcpServers``."""
    enabled: set[str] = set()
    disabled: set[str] = set()
    all_enabled = False
    for doc in docs:
        for key, into in ((ENABLED_KEY, enabled), (DISABLED_KEY, disabled)):
            names = doc.get(key)
            if isinstance(names, list):
                into.update(str(n) for n in names)
        all_enabled = all_enabled or doc.get(ALL_KEY) is True
    return McpjsonApproval(frozenset(enabled), frozenset(disabled), all_enabled)


def plan_servers(
    project_servers: Mapping[str, Any],
    local_servers: Mapping[str, Any],
    user_servers: Mapping[str, Any],
    approval: McpjsonApproval,
    exes: Executables,
    *,
    approve: Approve = frozenset(),
) -> ServerPlan:
    """The local-scope entries bir wants for the servers the project sees (local wins over project,
    project over user), the ``bir`` server among them."""
    plan = ServerPlan()
    approved: dict[str, Any] = {}
    for name, entry in project_servers.items():
        if name == api.BIR_SERVER or name in local_servers:
            continue
        if approval.approved(name):
            approved[name] = entry
        elif name in approval.disabled:
            plan.rejected.append(name)
            plan.skipped[name] = "rejected in Claude Code for this project"
        elif isinstance(entry, dict) and is_stdio(entry):
            if approve == "all" or name in approve:
                approved[name] = entry
                plan.approved.append(name)
            else:
                plan.unapproved[name] = command_line(entry)
                plan.skipped[name] = "a .mcp.json server not approved in Claude Code yet"
        else:
            # bir could not wrap it anyway: nothing to ask.
            kind = entry.get("type") if isinstance(entry, dict) else None
            plan.skipped[name] = (
                f"{kind or 'remote'} server: not wrapped" if isinstance(entry, dict) else "not a server entry"
            )
    effective: dict[str, Any] = {}
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
    plan.local[api.BIR_SERVER] = scenario_entry(exes)
    return plan


def check_approve(approve: Approve, plan: ServerPlan, project_servers: Mapping[str, Any]) -> None:
    """Refuse names given to approve that are not ``.mcp.json`` servers bir could wrap, or that the user
    turned down in Claude Code (theirs to take back there).

    Raises:
        InstallError: naming each such server and what to do instead.
    """
    if approve == "all":
        return
    problems: list[str] = []
    for name in sorted(approve):
        if name in plan.rejected:
            problems.append(
                f"{name} was turned down in Claude Code for this project ({DISABLED_KEY}): enable it there (/mcp) first"
            )
        elif name not in project_servers:
            known = ", ".join(sorted(n for n in project_servers if n != api.BIR_SERVER)) or "none"
            problems.append(f"{name} is not a server of this project's .mcp.json (its servers: {known})")
        elif name not in plan.approved and name not in plan.wrapped:
            problems.append(f"{name}: {plan.skipped.get(name, 'bir does not wrap it')}")
    if problems:
        raise InstallError("; ".join(problems) + ". Nothing was changed.")


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
    private_dir(folder.parent.parent, folder.parent.name, folder.name)
    target = folder / path.name
    fd = open_private(target, "write")
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
    # .mcp.json servers this install approved in Claude Code, and those still waiting (name → command line).
    servers_approved: list[str] = field(default_factory=list)
    servers_unapproved: dict[str, str] = field(default_factory=dict)
    approvals_taken_back: list[str] = field(default_factory=list)
    bir_server: bool = False
    hook_style: HookStyle = "mcp_tool"
    backup_dir: str | None = None

    @property
    def mcp_hooks(self) -> bool:
        """Whether the tool events are ``mcp_tool`` hooks on the ``bir`` server."""
        return self.hook_style == "mcp_tool"

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
            "serversApproved": self.servers_approved,
            "serversUnapproved": self.servers_unapproved,
            "approvalsTakenBack": self.approvals_taken_back,
            "birServer": self.bir_server,
            "hookStyle": self.hook_style,
            "mcpHooks": self.mcp_hooks,
            "backupDir": self.backup_dir,
        }


class _Writer:
    """Writes a file only if its bytes change, taking the backup first and keeping the file record."""

    def __init__(self, project: Path, record: Mapping[str, Any], change: Change, home: Path) -> None:
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


@dataclass(frozen=True)
class _Project:
    """A project's Claude Code configuration as read before a change: every file parsed, or an error."""

    project: Path
    settings_path: Path
    settings_doc: dict[str, Any]
    user_path: Path
    project_servers: dict[str, Any]
    user_servers: dict[str, Any]
    local_before: dict[str, Any]
    approval: McpjsonApproval


def _read_project(project: Path, env: Mapping[str, str] | None) -> _Project:
    """Read every file first: one that is not valid JSON stops the change before anything is written.

    Raises:
        InstallError: a file cannot be read, or is not the shape Claude Code reads.
    """
    settings_path = project / ".claude" / "settings.local.json"
    mcp_path = project / ".mcp.json"
    user_path = claude_config_file(env)
    _, settings_doc = read_json_file(settings_path)
    _, mcp_doc = read_json_file(mcp_path)
    _, config_doc = read_json_file(user_path)
    projects_doc = config_doc.get("projects")
    project_doc = projects_doc.get(str(project)) if isinstance(projects_doc, dict) else None
    approval = read_approval(
        project_doc if isinstance(project_doc, dict) else {},
        settings_doc,
        _lenient_json(project / ".claude" / "settings.json"),
        _lenient_json(claude_settings_file(env)),
    )
    return _Project(
        project=project,
        settings_path=settings_path,
        settings_doc=settings_doc,
        user_path=user_path,
        project_servers=_servers_of(mcp_doc, mcp_path),
        user_servers=_servers_of(config_doc, user_path),
        local_before=_local_servers(config_doc, project),
        approval=approval,
    )


def _owned_entries(
    record: Mapping[str, Any], local: Mapping[str, dict[str, Any]], local_before: Mapping[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """The local entries bir owns after writing ``local``, and the entries they replaced (put back at uninstall)."""
    previous: dict[str, Any] = dict(record.get("previousLocal", {}))
    owned: list[str] = list(record.get("localServers", []))
    for name, entry in local.items():
        if name not in owned and local_before.get(name) != entry:
            owned.append(name)
            if name in local_before:
                previous[name] = local_before[name]
    return owned, previous


def stored_hook_style(record: Mapping[str, Any]) -> HookStyle:
    """The hook style an install record says was written (an older record: ``mcpHooks``, else commands)."""
    style = record.get("hookStyle")
    if style in ("mcp_tool", "command"):
        return "mcp_tool" if style == "mcp_tool" else "command"
    return "mcp_tool" if record.get("mcpHooks") is True else "command"


def install(
    project_dir: str | os.PathLike[str],
    *,
    replay: bool,
    exes: Executables,
    command_hooks: bool = False,
    approve: Approve = frozenset(),
    env: Mapping[str, str] | None = None,
) -> Change:
    """Install bir in the project (idempotent); see the module's docstring.

    ``approve``: the unapproved ``.mcp.json`` servers to approve in Claude Code and wrap (``"all"``: every
    one); the others are left alone and listed in ``Change.servers_unapproved``.

    Raises:
        InstallError: a file is not valid JSON or not the expected shape, a name in ``approve`` is not
            one bir can approve (nothing changed in either case), or a file cannot be written.
    """
    project = resolve_project(project_dir)
    if not project.is_dir():
        raise InstallError(f"{project} is not a directory")
    home = config.home(env)
    style: HookStyle = "command" if command_hooks else "mcp_tool"
    seen = _read_project(project, env)
    plan = plan_servers(
        seen.project_servers, seen.local_before, seen.user_servers, seen.approval, exes, approve=approve
    )
    check_approve(approve, plan, seen.project_servers)
    # The settings' shape is checked before anything is written.
    with_approvals(merge_hooks(seen.settings_doc, exes, style=style)[0], plan.approved)

    stored = installed.project(project, home)
    record: dict[str, Any] = dict(stored.install) if stored is not None else {}
    change = Change(project=str(project), action="install", replay=replay, hook_style=style)
    owned, previous = _owned_entries(record, plan.local, seen.local_before)
    approved = [str(n) for n in record.get("approvedServers", [])]
    key_created = bool(record.get("approvalsKeyCreated", False))
    if plan.approved and not approved:
        key_created = not isinstance(seen.settings_doc.get(ENABLED_KEY), list)
    approved += [n for n in plan.approved if n not in approved]

    writer = _Writer(project, record, change, home)
    created_claude_dir = not seen.settings_path.parent.exists()
    try:

        def settings(doc: dict[str, Any]) -> dict[str, Any]:
            return with_approvals(merge_hooks(doc, exes, style=style)[0], plan.approved)

        writer.write(seen.settings_path, settings, mode=0o644)

        def servers(doc: dict[str, Any]) -> dict[str, Any]:
            local = _local_servers(doc, project)
            local.update(plan.local)
            return _with_local_servers(doc, project, local)

        writer.write(seen.user_path, servers, mode=0o600)
    except OSError as exc:
        raise InstallError(f"cannot write: {exc}") from exc
    change.hooks = list(HOOK_EVENTS)
    change.servers_wrapped = plan.wrapped
    change.servers_left = plan.skipped
    change.servers_approved = plan.approved
    change.servers_unapproved = plan.unapproved
    change.bir_server = True
    new_record = {
        **record,
        "hookStyle": style,
        "mcpHooks": style == "mcp_tool",
        "files": writer.files,
        "localServers": owned,
        "previousLocal": previous,
        "approvedServers": approved,
        "approvalsKeyCreated": key_created,
        "createdClaudeDir": record.get("createdClaudeDir", created_claude_dir),
    }
    try:
        installed.update(project, home, replay=replay, down=False, install=new_record)
    except installed.StoreError as exc:
        raise InstallError(str(exc)) from exc
    return change


def wrap_approved(
    project_dir: str | os.PathLike[str], *, exes: Executables | None = None, env: Mapping[str, str] | None = None
) -> list[str]:
    """Wrap the ``.mcp.json`` servers the user approved in Claude Code since bir was installed, for the
    project's next session; nothing else changes. The names wrapped (none when bir is not installed,
    nothing new was approved, or a file cannot be read).

    Raises:
        InstallError: a file cannot be written, or this installation has no ``bir-proxy``.
    """
    project = resolve_project(project_dir)
    home = config.home(env)
    stored = installed.project(project, home)
    if stored is None:
        return []
    record = dict(stored.install)
    try:
        seen = _read_project(project, env)
    except InstallError:
        return []
    exes = exes or find_executables()
    plan = plan_servers(seen.project_servers, seen.local_before, seen.user_servers, seen.approval, exes)
    known = set(record.get("localServers", []))
    fresh = {
        name: entry
        for name, entry in plan.local.items()
        if name in seen.project_servers and name not in known and name not in seen.local_before
    }
    if not fresh:
        return []
    change = Change(project=str(project), action="wrap", replay=stored.replay)
    owned, previous = _owned_entries(record, fresh, seen.local_before)
    writer = _Writer(project, record, change, home)

    def servers(doc: dict[str, Any]) -> dict[str, Any]:
        local = _local_servers(doc, project)
        local.update(fresh)
        return _with_local_servers(doc, project, local)

    try:
        writer.write(seen.user_path, servers, mode=0o600)
    except OSError as exc:
        raise InstallError(f"cannot write: {exc}") from exc
    installed.update(
        project, home, install={**record, "files": writer.files, "localServers": owned, "previousLocal": previous}
    )
    return sorted(fresh)


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
) -> Change:
    """Take bir out of the project: restore what install changed, the approvals it recorded included
    (``replay_only``: only turn replay off; the hooks, the proxies and the ``bir`` server stay, and the
    ``bir`` server lists no tools while replay is off).

    Raises:
        InstallError: a file is not valid JSON (nothing changed), one cannot be written, or bir is not
            installed in the project.
    """
    project = resolve_project(project_dir)
    home = config.home(env)
    stored = installed.project(project, home)
    if stored is None:
        raise InstallError(f"bir is not installed in {project}")
    record = dict(stored.install)
    change = Change(
        project=str(project),
        action="uninstall --replay" if replay_only else "uninstall",
        replay=False,
        hook_style=stored_hook_style(record),
    )
    if replay_only:
        try:
            installed.update(project, home, replay=False)
        except installed.StoreError as exc:
            raise InstallError(str(exc)) from exc
        return change
    files = dict(record.get("files", {}))
    owned = [str(n) for n in record.get("localServers", [])]
    previous = dict(record.get("previousLocal", {}))
    approved = [str(n) for n in record.get("approvedServers", [])]
    key_created = bool(record.get("approvalsKeyCreated", False))
    settings_path = project / ".claude" / "settings.local.json"
    user_path = claude_config_file(env)
    _, settings_doc = read_json_file(settings_path)
    read_json_file(user_path)
    enabled = settings_doc.get(ENABLED_KEY)
    change.approvals_taken_back = [n for n in approved if isinstance(enabled, list) and n in enabled]

    def strip_settings(doc: dict[str, Any]) -> dict[str, Any]:
        return strip_approvals(strip_hooks(doc), approved, key_created=key_created)

    def strip_servers(doc: dict[str, Any]) -> dict[str, Any]:
        local = _local_servers(doc, project)
        restored = [name for name in owned if _restore_local(local, name, previous)]
        change.servers_restored = [n for n in restored if n in previous]
        if not restored:
            return doc
        return _with_local_servers(doc, project, local)

    try:
        _put_back(settings_path, files.get(str(settings_path)), strip_settings, change)
        if record.get("createdClaudeDir"):
            with contextlib.suppress(OSError):
                settings_path.parent.rmdir()  # only if empty
        _put_back(user_path, files.get(str(user_path)), strip_servers, change)
        installed.remove(project, home)
    except OSError as exc:
        raise InstallError(f"cannot write: {exc}") from exc
    change.hooks = list(HOOK_EVENTS)
    return change


# -- reading what is there (status, doctor) --------------------------------------------------------


@dataclass(frozen=True)
class Unwrapped:
    """A server the project's sessions run that no ``bir-proxy`` wraps, and why."""

    name: str
    why: str
    # The one command that wraps it (None: bir cannot, e.g. an http server).
    fix: str | None


def unwrapped_servers(project_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> list[Unwrapped]:
    """Every MCP server of the project that runs unwrapped (its scenarios' steps then steer instead of
    running direct), as the files say now; empty when they cannot be read."""
    project = resolve_project(project_dir)
    try:
        seen = _read_project(project, env)
        exes = find_executables()
    except InstallError:
        return []
    plan = plan_servers(seen.project_servers, seen.local_before, seen.user_servers, seen.approval, exes)
    found: list[Unwrapped] = []
    for name, why in sorted(plan.skipped.items()):
        if name in plan.unapproved:
            waiting = f"not approved in Claude Code yet ({plan.unapproved[name]})"
            found.append(Unwrapped(name, waiting, f"bir install --approve {name}"))
        else:
            found.append(Unwrapped(name, why, None))
    stored = installed.project(project, config.home(env))
    owned = set(stored.install.get("localServers", [])) if stored is not None else set()
    for name in sorted(plan.local):
        if name != api.BIR_SERVER and name not in owned and name not in seen.local_before:
            # Approved since the install: the next session start wraps it.
            found.append(Unwrapped(name, "approved in Claude Code since bir install: the next session wraps it", None))
    return found


def pending_approval(
    project_dir: str | os.PathLike[str], exes: Executables, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The project's ``.mcp.json`` stdio servers Claude Code has not approved (name → command line): what
    ``bir install`` asks about.

    Raises:
        InstallError: a project file cannot be read.
    """
    seen = _read_project(resolve_project(project_dir), env)
    return plan_servers(seen.project_servers, seen.local_before, seen.user_servers, seen.approval, exes).unapproved
