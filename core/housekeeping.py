"""Which tool calls are bir's own housekeeping, never recorded as a run's steps (issue 8, item 4).

bir's own calls would teach a scenario to call bir: the ``bir`` MCP server's tools (``run_scenario``,
the scenario tools, and ``hook``, which ``bir install --mcp-hooks`` has Claude Code call as a hook and
which a model that called it anyway must not turn into a step), Claude Code's ``ToolSearch``, and a
shell command made only of ``bir`` invocations (``bir scenario show scn_1 && cd x``). A command with
anything else in it is the user's work and is recorded whole (``bir x; rm -rf /``). A command that
cannot be read, or that substitutes another command (``bir $(rm -rf /)``), is not housekeeping: when
in doubt, record.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Final

from bir.core.shell_shape import Head, ShellParseError, command_shape, has_substitution

BIR_TOOL_PREFIX: Final = "mcp__bir__"
_HOUSEKEEPING_TOOLS: Final = frozenset({"ToolSearch"})
_SHELL_TOOLS: Final = {"Bash": False, "PowerShell": True}
# The console scripts bir installs: `bir`, `bir-hook`, `bir-hooks`, `bir-scenario`, `bir-proxy`.
_BIR_PROGRAMS: Final = frozenset({"bir", "bir-hook", "bir-hooks", "bir-scenario", "bir-proxy"})
# Chaining that runs the commands one after another; a pipe or a background job is real work.
_SEQUENCING: Final = frozenset({"&&", "||", ";"})
# A shell command is read only up to this size: a longer one is not a few `bir` invocations.
_MAX_COMMAND_CHARS: Final = 10_000


def _program_name(word: str, powershell: bool) -> str:
    name = posixpath.basename(word.replace("\\", "/"))
    if powershell and name.lower().endswith(".exe"):
        name = name[:-4]
    return name.lower() if powershell else name


def _is_bir(head: Head, powershell: bool) -> bool:
    return bool(head) and _program_name(head[0], powershell) in _BIR_PROGRAMS


def _is_cd(head: Head, powershell: bool) -> bool:
    # PowerShell's Set-Location is not a known plain program, so the shape may keep its operand.
    return bool(head) and _program_name(head[0], powershell) in {"cd", "set-location", "sl"}


def is_housekeeping_command(command: str, *, powershell: bool = False) -> bool:
    """True when a shell command runs only ``bir`` commands, chained in sequence, with at most ``cd``s."""
    if len(command) > _MAX_COMMAND_CHARS or has_substitution(command):
        return False
    try:
        shape = command_shape(command, powershell=powershell)
    except ShellParseError:
        return False
    saw_bir = False
    for item in shape:
        if isinstance(item, str):
            if item not in _SEQUENCING:
                return False
        elif _is_bir(item, powershell):
            saw_bir = True
        elif not _is_cd(item, powershell):
            return False
    return saw_bir


# A diverging Bash call rewritten to print bir's results (``bir.core.delivery``): its heredoc, or its file.
_DELIVERY: Final = re.compile(r"cat <<'BIR_EOF_[0-9a-f]{1,12}'\n|cat '?/[^'\n]*/tmp/bundle-[0-9a-f]{16}\.txt'?\Z")


def is_delivery_command(command: str) -> bool:
    """True for the command bir put in a diverging ``Bash`` call's place to print a replay's results."""
    return _DELIVERY.match(command) is not None


def is_housekeeping(tool_name: str, tool_input: object) -> bool:
    """True when a tool call is bir's own (never recorded as a step).

    ``mcp__bir__*`` tools, ``ToolSearch``, a ``Bash``/``PowerShell`` call whose ``command`` is made only
    of ``bir`` invocations and plain ``cd``s, and a ``Bash`` call bir rewrote to print a replay's results.
    """
    if tool_name.startswith(BIR_TOOL_PREFIX) or tool_name in _HOUSEKEEPING_TOOLS:
        return True
    powershell = _SHELL_TOOLS.get(tool_name)
    if powershell is None or not isinstance(tool_input, Mapping):
        return False
    command = tool_input.get("command")
    if not isinstance(command, str):
        return False
    return is_housekeeping_command(command, powershell=powershell) or (not powershell and is_delivery_command(command))
