"""The steering directive: the text that arms a plan (spec §6.4, §7).

A direct plan asks the model to call ``run_scenario`` once; a steer plan lists its tools in order, with
the arguments known now for each step that shows them (a pin then runs with exactly what was shown).
Pure text: redacted, and never longer than ``MAX_DIRECTIVE_CHARS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from bir.core.bundle import render_input
from bir.core.coverage import ReplayMode
from bir.core.redact import redact_text
from bir.core.safety import check_derived_values
from bir.core.tool_kinds import SHELL_TOOLS
from bir.core.truncate import cut, one_line
from bir.core.types import Scenario, ScenarioStep

TAG: Final = "[BaseInstRunner calculated replay]"
# additionalContext is read whole by the model; the host keeps well under 10,000 characters of it.
MAX_DIRECTIVE_CHARS: Final = 9_000
MAX_STEP_LINE_CHARS: Final = 240
MAX_INTENT_CHARS: Final = 500

DIRECT_CLOSING: Final = (
    "Call mcp__bir__run_scenario once, with no arguments, before any other tool.\n"
    "Then answer the user's request from the results it returns."
)
STEER_CLOSING_SHOWN: Final = (
    "The system supplies the exact arguments for each call. Where a step shows its arguments above, "
    "they are the ones it runs with: pass them as shown."
)
STEER_CLOSING_OLDER: Final = "The system supplies the exact arguments for each call — you do not need to compute them."
STEER_CLOSING_TAIL: Final = (
    "Do not call any other tools until this sequence is complete, then answer the user's request from the tool results."
)

_READS_RESP_PARAMS = re.compile(r"\brespParams\b")


def reads_resp_params(step: ScenarioStep) -> bool:
    """True when the step's input is computed from an earlier step's output (its body names ``respParams``)."""
    return bool(_READS_RESP_PARAMS.search(step.tool_input_logic or ""))


def shown_arguments(
    scenario: Scenario, derived: Mapping[str, object] | None, inputs: Mapping[int, dict[str, Any]]
) -> dict[int, str]:
    """The argument line of each step that shows one (steer mode only), from the inputs computed so far.

    A step reading an earlier output, or a multi-line shell command, shows none; a plan holding a
    derived value the injection guard refuses (or none yet) shows none at all (§7, §13.2).
    """
    if derived is None or not check_derived_values(scenario, derived).ok:
        return {}
    shown: dict[int, str] = {}
    for position, tool_input in inputs.items():
        step = scenario.steps[position]
        if reads_resp_params(step):
            continue
        command = tool_input.get("command")
        if step.tool_name in SHELL_TOOLS and isinstance(command, str) and len(command.strip().splitlines()) > 1:
            continue
        shown[position] = render_input(step.tool_name, tool_input, redact_text)
    return shown


def steering_directive(scenario: Scenario, mode: ReplayMode, shown: Mapping[int, str]) -> str:
    """The directive of a plan in ``mode``; ``shown`` maps a step's position to its argument line."""
    intent = one_line(redact_text(scenario.intent), MAX_INTENT_CHARS)
    steps = scenario.steps
    if mode == "direct":
        opening = f"{TAG} A known-good tool sequence was recorded for this request"
        head = (opening + (f" (intent: {intent})." if intent else ".")) + (
            "\n\nIt runs these tools, in order, and returns their results:"
        )
        return _fit(head, [_step_line(steps, p) for p in range(len(steps))], DIRECT_CLOSING)
    head = (
        f"{TAG} A known-good tool sequence was previously recorded for this request. "
        "Call exactly these tools, in order, one at a time:"
    )
    blocks = []
    for position in range(len(steps)):
        arguments = shown.get(position)
        blocks.append(_step_line(steps, position) + (f"\n   {arguments}" if arguments else ""))
    closing = STEER_CLOSING_SHOWN if shown else STEER_CLOSING_OLDER
    tail = (f"Context: {intent}\n\n" if intent else "") + closing + "\n" + STEER_CLOSING_TAIL
    return _fit(head, blocks, tail)


def _step_line(steps: tuple[ScenarioStep, ...], position: int) -> str:
    step = steps[position]
    reasoning = " ".join(redact_text(step.reasoning).split())
    text = f"{position + 1}. {' '.join(step.tool_name.split())}" + (f" — {reasoning}" if reasoning else "")
    return cut(text, MAX_STEP_LINE_CHARS)


def _fit(head: str, blocks: list[str], tail: str) -> str:
    """Head, as many step blocks as fit (then how many were left out), tail: within ``MAX_DIRECTIVE_CHARS``."""
    room = MAX_DIRECTIVE_CHARS - len(head) - len(tail) - 4
    kept: list[str] = []
    used = 0
    for i, block in enumerate(blocks):
        more = len(blocks) - i - 1
        reserve = len(f"\n… and {more} more steps") if more else 0
        if used + len(block) + 1 + reserve > room:
            kept.append(f"… and {len(blocks) - i} more steps")
            break
        kept.append(block)
        used += len(block) + 1
    text = head + "\n\n" + "\n".join(kept) + "\n\n" + tail
    return cut(text, MAX_DIRECTIVE_CHARS)
