"""The logic contract's one error type: how a logic body failed (``LogicError`` and its reasons).

It lives in ``core`` because the plan and the logic entry points speak it, and the evaluator raises it.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from bir.core.truncate import cut

MAX_MESSAGE_CHARS: Final = 1000

Reason = Literal["threw", "compile", "result", "timeout", "memory", "refused", "crashed", "overloaded", "closed"]
REASONS: Final = frozenset(get_args(Reason))


class LogicError(Exception):
    """A logic body did not produce a result.

    ``reason`` says why, as one of ``REASONS``; ``message`` is at most 1,000 characters, whatever
    the body threw; ``kind`` names the logic entry point (``toolOutputLogic``, …).
    """

    def __init__(self, reason: Reason, message: str, kind: str = "") -> None:
        self.reason: Reason = reason
        self.message = cut(message, MAX_MESSAGE_CHARS)
        self.kind = kind
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"LogicError(reason={self.reason!r}, message={self.message[:80]!r})"


def as_reason(value: str | None) -> Reason:
    """A worker's reason, or ``crashed`` for anything a worker should not have said."""
    return value if value in REASONS else "crashed"  # type: ignore[return-value]
