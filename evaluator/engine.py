"""What an engine of the worker answers, and the texts of the evaluator's failures.

Engines live only in worker processes; nothing here imports one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from bir.core.truncate import cut
from bir.evaluator.wire import Job

MAX_MESSAGE_CHARS: Final = 1000


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Cut a message to ``limit`` characters, marking the cut (``bir.core.truncate.cut``)."""
    return cut(message, limit)


def timeout_message(kind: str, timeout_ms: int) -> str:
    return f"{kind} ran longer than {timeout_ms} ms and was stopped"


def memory_message(kind: str, memory_mb: int) -> str:
    return f"{kind} ran out of memory (the limit is {memory_mb} MB) and was stopped"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One job's answer. ``retire`` asks the supervisor to replace the worker after it; ``settle``
    says the job may have queued work that runs after it, so the realm must be settled again."""

    ok: bool
    value: str | None = None
    reason: str | None = None
    message: str | None = None
    retire: str | None = None
    settle: bool = False
    sent: bool = False  # the engine already sent this answer (see V8Engine.answer_early)


class Wedged(Exception):
    """The engine did not stop when told to: the worker must exit."""


class Engine(Protocol):
    name: str
    version: str

    def run(self, job: Job) -> Outcome:
        """Run one job under its time limit.

        Raises:
            Wedged: the engine could not be stopped; the outcome is a timeout and the worker exits.
        """
        ...

    def settle(self, deadline: float) -> str:
        """Undo what the last job left behind, after any work it queued; "" or why the worker must retire.

        Raises:
            Wedged: work the job queued did not finish before ``deadline`` (``time.monotonic()``).
        """
        ...
