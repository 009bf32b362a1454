"""Hand edits of a scenario's steps (spec §16.5): the rules the fake service keeps, with a real check. Pure
except for the check it is handed.

A change is saved only if the check finds no problem (the scenario, with the change, still reproduces
the recording in the sandbox), or on purpose with ``force`` and a ``note``, and is then recorded as
forced. ``freeze`` marks a step ``by_hand``; only ``unfreeze``, undoing the freeze, or a recalculation
that discards the edits removes it (a forced save lifts only a mark the calculation set). Every save
and every undo moves the scenario's ``chainRevision`` on.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

EDITABLE: Final = {"inputLogic": "toolInputLogic", "outputLogic": "toolOutputLogic"}
MAX_LOGIC_CHARS: Final = 50_000


@dataclass(frozen=True)
class Refusal:
    status: int
    body: dict[str, Any]


def refuse(status: int, error: str, **more: Any) -> Refusal:
    return Refusal(status, {"error": error, **more})


def validate(body: object) -> Mapping[str, Any] | Refusal:
    if not isinstance(body, dict):
        return refuse(400, "a JSON object is required")
    if sum(len(v) for v in body.values() if isinstance(v, str)) > MAX_LOGIC_CHARS:
        return refuse(413, "payload_too_large")
    return body


def find_step(scenario: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    for step in scenario.get("steps") or []:
        if isinstance(step, dict) and step.get("stepIndex") == index:
            return step
    return None


def changed(step: Mapping[str, Any], change: Mapping[str, Any], *, save: bool) -> dict[str, Any]:
    """The step as ``change`` would leave it."""
    after = copy.deepcopy(dict(step))
    for wire, name in EDITABLE.items():
        if isinstance(change.get(wire), str):
            after[name] = change[wire]
    if change.get("freeze"):
        after["mark"] = "by_hand"
    forced = save and change.get("force") is True
    if change.get("unfreeze") or (forced and after.get("mark") == "calculation"):
        after["mark"] = None
    return after


def with_step(scenario: Mapping[str, Any], index: int, step: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(scenario))
    out["steps"] = [dict(step) if s.get("stepIndex") == index else s for s in out.get("steps") or []]
    return out


def changes_of(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k != "sample")


def same_step(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    return not changes_of(before, after)


def entry(
    kind: str,
    index: int,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    note: object,
    forced: bool,
    revision: int,
) -> dict[str, Any]:
    return {
        "kind": kind,
        "stepIndex": index,
        "changes": changes_of(before, after),
        "note": note if isinstance(note, str) else None,
        "forced": forced,
        "undone": False,
        "chainRevision": revision,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
