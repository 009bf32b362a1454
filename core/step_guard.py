"""A step's computed shell command against its recorded one (issue 16 item 1, spec §13.2).

A pinned or directly-run step is approved without a prompt because it is the user's own recorded
step. Its arguments are recomputed for this turn, from derived parameters and earlier outputs, and
the injection guard (``bir.core.safety``) keeps each such value a plain word. This guard holds the
whole command to the recorded one: the command a step's ``toolInputLogic`` computes from the
scenario's recorded sample values (its ``paramsObject`` samples, no earlier outputs) is the recorded
command, and this turn's command must run the same commands, chained the same way, and write or
execute (a redirection, ``git -c``, ``find -exec``, ``curl -o``: ``bir.core.shell_effects``) only in
ways the recorded one does. Where an effect's *target* may differ (``> report-<region>.txt``), the
pin guard holds it to the model's own call.

When the recorded command cannot be computed (its body throws without earlier outputs), this turn's
command may not write or execute beyond its heads at all.

Pure; shell tools and MCP tools named for a shell only (a query's verbs are the pin guard's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Final

from bir.core.pin_guard import statement_keys, statements
from bir.core.safety import SafetyVerdict
from bir.core.shell_shape import ShellParseError, command_profile, render
from bir.core.tool_kinds import SHELL_TOOLS, runs_powershell, runs_shell
from bir.core.truncate import cut

MAX_COMPARED_CHARS: Final = 200_000
_SHOWN_CHARS: Final = 80


def command_keys(tool_name: str, tool_input: Mapping[str, object]) -> list[str]:
    """The arguments of ``tool_input`` that hold shell commands, for a tool that runs them."""
    if tool_name in SHELL_TOOLS:
        return ["command"] if "command" in tool_input else []
    if not runs_shell(tool_name):
        return []
    return sorted(statement_keys(tool_input), key=str)


def _shown(text: str) -> str:
    return cut(" ".join(text.split()), _SHOWN_CHARS)


def check_recorded_shape(
    tool_name: str, tool_input: Mapping[str, object], recorded: Mapping[str, object] | None
) -> SafetyVerdict:
    """Whether each shell command of ``tool_input`` keeps the shape of the same argument in ``recorded``
    (the step's input from its recorded sample values; None when it could not be computed)."""
    powershell = runs_powershell(tool_name)
    for key in command_keys(tool_name, tool_input):
        mine = statements(tool_input.get(key))
        theirs = statements(recorded.get(key)) if recorded is not None else None
        if theirs is not None and len(mine) != len(theirs):
            return SafetyVerdict(False, key, f"`{key}` runs {len(mine)} command(s), the recorded step {len(theirs)}")
        for n, command in enumerate(mine):
            reason = _compare(command, theirs[n] if theirs is not None else None, powershell)
            if reason is not None:
                return SafetyVerdict(False, key, f"`{key}`: {reason}")
    return SafetyVerdict(True, None, "every command keeps the recorded command's shape")


def _compare(command: str, recorded: str | None, powershell: bool) -> str | None:
    if recorded is not None and command.strip() == recorded.strip():
        return None
    if len(command) > MAX_COMPARED_CHARS:
        return "the command is too long to compare with the recorded one"
    try:
        profile = command_profile(command, powershell=powershell)
    except ShellParseError as exc:
        return f"the command cannot be read ({exc})"
    if recorded is None:
        if profile.effects:
            return (
                f"the command does `{profile.effects[0].name}` and its recorded command could not be computed "
                "to show it did"
            )
        return None
    try:
        recorded_profile = command_profile(recorded[:MAX_COMPARED_CHARS], powershell=powershell)
    except ShellParseError:
        return "the recorded command cannot be read; only an exact copy runs"
    if profile.shape != recorded_profile.shape:
        return (
            f"the command runs `{_shown(render(profile.shape))}`, the recorded step "
            f"`{_shown(render(recorded_profile.shape))}`"
        )
    allowed = Counter(effect.name for effect in recorded_profile.effects)
    for effect in profile.effects:
        if allowed[effect.name] <= 0:
            return f"the command does `{effect.name}`, the recorded step does not"
        allowed[effect.name] -= 1
    return None
