"""``bir install`` / ``bir uninstall``: the commands over ``bir.hooks.wiring`` (what they write, and why).

On a terminal, ``bir install`` shows each ``.mcp.json`` server Claude Code has not approved for the project
yet, with its command line, and asks whether to wrap it (which approves it in Claude Code too); ``--yes``
approves them all and ``--approve NAME[,NAME]`` some, for scripts. Without a terminal and without either
flag nothing is approved: the output names each server left unwrapped and the one command that wraps it,
and the exit is still 0.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from bir.core import config
from bir.core.exits import EXIT_OK, EXIT_USAGE
from bir.core.paths import resolve_project
from bir.hooks import api
from bir.hooks.commands import learn
from bir.hooks.commands.result import CommandError, Subparsers, add_command, json_flag, project_flag, write_json
from bir.hooks.wiring import (
    Approve,
    Change,
    InstallError,
    find_executables,
    install,
    pending_approval,
    uninstall,
)

_HOOK_SCRIPT = "bir-hook"


def rerun(args: argparse.Namespace, approve: str) -> str:
    """The one command that installs again as ``args`` did, approving ``approve`` (a name, or a list)."""
    words = ["bir", "install"]
    if args.replay:
        words.append("--replay")
    if getattr(args, "command_hooks", False):
        words.append("--command-hooks")
    if args.project not in (None, "."):
        words += ["--project", str(args.project)]
    return shlex.join([*words, "--approve", approve])


def describe(change: Change, again: Callable[[str], str] | None = None) -> str:
    """What ``change`` did, in sentences; ``again(name)`` is the command that wraps a server left unapproved."""
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
        if change.servers_approved:
            lines.append(
                "  Approved in Claude Code for this project (enabledMcpjsonServers): "
                + ", ".join(change.servers_approved)
                + "."
            )
        if change.servers_wrapped:
            lines.append(f"  MCP servers behind bir-proxy (local scope): {', '.join(change.servers_wrapped)}.")
        for name, why in change.servers_left.items():
            if name not in change.servers_unapproved:
                lines.append(f"  Left alone: {name} ({why}).")
        if change.servers_unapproved:
            lines.append(
                "  Not wrapped: Claude Code has not approved these .mcp.json servers for this project, and bir wraps"
                " one only when you approve it (a scenario calling their tools is steered instead of run direct):"
            )
            for name, command in change.servers_unapproved.items():
                how = f" — to wrap it: {again(name)}" if again is not None else ""
                lines.append(f"    {name}: {command}{how}")
        lines.append(
            "  Replay is ON: the `bir` MCP server lists run_scenario, and scenario steps may run without permission"
            " prompts."
            if change.replay
            else "  Replay is off: the `bir` MCP server lists no tools (run `bir install --replay` to turn it on)."
        )
        if change.backup_dir:
            lines.append(f"  Backups of the changed files: {change.backup_dir}")
        lines.append("  To undo all of it: bir uninstall")
        return "\n".join(lines)
    if change.action == "uninstall --replay":
        lines.append(
            f"Replay is off in {change.project}: the `bir` MCP server lists no tools from now on; the hooks, the"
            " proxies and the `bir` server stay (bir uninstall takes them out)."
        )
    else:
        lines.append(f"bir is uninstalled from {change.project}.")
    for path in change.files_changed:
        lines.append(f"  restored {path}")
    for path in change.files_removed:
        lines.append(f"  removed {path} (install had created it)")
    if change.servers_restored:
        lines.append(f"  Local-scope servers put back as they were: {', '.join(change.servers_restored)}.")
    if change.approvals_taken_back:
        lines.append(
            f"  Approvals bir had recorded in Claude Code taken back: {', '.join(change.approvals_taken_back)}."
        )
    return "\n".join(lines)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir install`` and ``bir uninstall``."""
    for name, helptext, replay_help, examples in (
        (
            "install",
            "wire bir into a project's Claude Code hooks and MCP servers",
            "also turn replay on",
            ["bir install --replay", "bir install --replay --yes", "bir install --approve fleet --project ~/src/app"],
        ),
        (
            "uninstall",
            "take bir out of a project, restoring what install changed, and stop its control server",
            "only turn replay off (the hooks, the proxies, the `bir` server and the control server stay)",
            ["bir uninstall --replay", "bir uninstall"],
        ),
    ):
        cmd = add_command(sub, name, helptext, examples)
        cmd.add_argument("--replay", action="store_true", help=replay_help)
        if name == "install":
            cmd.add_argument(
                "--yes",
                action="store_true",
                help="approve every .mcp.json server Claude Code has not approved yet, and wrap it (no questions)",
            )
            cmd.add_argument(
                "--approve",
                metavar="NAME[,NAME]",
                action="append",
                default=[],
                help="approve these .mcp.json servers in Claude Code and wrap them (no questions)",
            )
            cmd.add_argument(
                "--command-hooks",
                action="store_true",
                help="the tool events' hooks as bir-hook commands (a process per tool call) instead of mcp_tool"
                " hooks on the `bir` server",
            )
            cmd.add_argument(
                "--mcp-hooks",
                action="store_true",
                help="the default: the tool events' hooks are mcp_tool hooks on the `bir` server (kept for scripts)",
            )
            cmd.add_argument(
                "--learn", action="store_true", help="then learn from the project's past sessions (bir learn)"
            )
        project_flag(cmd)
        json_flag(cmd, "print one JSON document describing what changed")
        cmd.set_defaults(run=run)


def _on_a_terminal(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> bool:
    try:
        return not args.json and stdin.isatty() and stdout.isatty()
    except (AttributeError, ValueError):
        return False


def ask_approvals(pending: Mapping[str, str], stdin: TextIO, stdout: TextIO) -> frozenset[str]:
    """Ask about each unapproved server on the terminal; the names the person said yes to (EOF is no)."""
    stdout.write(
        f"{len(pending)} .mcp.json server{'s' if len(pending) != 1 else ''} of this project "
        f"{'are' if len(pending) != 1 else 'is'} not approved in Claude Code yet. bir runs a server behind "
        "bir-proxy only once it is approved; wrapping it approves it in Claude Code too.\n"
    )
    chosen: set[str] = set()
    for name, command in pending.items():
        stdout.write(f"  {name}: {command}\nWrap {name} (and allow it in Claude Code)? [y/N] ")
        stdout.flush()
        answer = stdin.readline()
        if not answer:
            stdout.write("\n")
            break
        if answer.strip().lower() in ("y", "yes"):
            chosen.add(name)
    return frozenset(chosen)


def _approve(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> Approve:
    """What this install approves: ``--yes``, ``--approve``, else what the person says on a terminal.

    Raises:
        InstallError: a project file cannot be read.
    """
    if args.yes:
        return "all"
    names = frozenset(n.strip() for given in args.approve for n in given.split(",") if n.strip())
    if names or not _on_a_terminal(args, stdin, stdout):
        return names
    pending = pending_approval(args.project, find_executables())
    return ask_approvals(pending, stdin, stdout) if pending else frozenset()


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir install`` or ``bir uninstall``.

    Raises:
        CommandError: a file could not be read or written (nothing changed), bir is not installed there,
            or ``--yes`` and ``--approve`` were both given.
    """
    from bir.hooks.commands.switches import stop_server

    if args.command == "install" and args.yes and args.approve:
        raise CommandError("give --yes or --approve, not both", EXIT_USAGE)
    try:
        if args.command == "install":
            approve = _approve(args, sys.stdin, sys.stdout)
            change = install(
                args.project,
                replay=args.replay,
                exes=find_executables(),
                command_hooks=args.command_hooks,
                approve=approve,
            )
        else:
            change = uninstall(args.project, replay_only=args.replay)
    except InstallError as exc:
        raise CommandError(str(exc)) from None
    doc = change.to_json()
    if change.action == "install":
        doc["wrapCommands"] = {name: rerun(args, name) for name in change.servers_unapproved}
    text = describe(change, lambda name: rerun(args, name))
    if args.command == "uninstall" and not args.replay:
        # Nothing is installed to use it any more: a server left running would hold its V8 workers for nothing.
        try:
            stopped = stop_server(Path(change.project))
        except CommandError as exc:
            stopped, text = None, f"{text}\n  warning: its control server was not stopped: {exc}"
            doc["warnings"] = [f"its control server was not stopped: {exc}"]
        if stopped is not None:
            text += f"\n  Stopped its control server (pid {stopped.pid})."
        doc["stoppedServer"] = None if stopped is None else stopped.pid
    if not args.json:
        sys.stdout.write(text + "\n")
    if args.command == "install":
        # bir install offers to learn from the project's past sessions (asks on a terminal; --learn for scripts).
        learned = learn.offer(resolve_project(args.project), settings, forced=args.learn, as_json=args.json)
        if learned is not None:
            doc["learned"] = learned
    if args.json:
        write_json(doc, sys.stdout)
    return EXIT_OK
