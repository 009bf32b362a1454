"""When a prompt may wait on the service's match (spec §10, §14): the cool-down and the match gate.

Both are small clocks the controller consults before it waits. Pure: the caller passes ``now``
(``time.monotonic()``), so the rules are tested without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# After a failed request, nothing waits on the service for this long (§14 "cooling down").
COOL_DOWN_S: Final = 60.0
# A slow match holds prompts off the match for 5 minutes, doubling up to 30 while it stays slow (§10).
HOLD_FIRST_S: Final = 5 * 60.0
HOLD_MAX_S: Final = 30 * 60.0


@dataclass
class ServiceHealth:
    """Whether the service is cooling down after a failure."""

    cool_down_s: float = COOL_DOWN_S
    _until: float = 0.0

    def failed(self, now: float) -> None:
        self._until = now + self.cool_down_s

    def answered(self) -> None:
        self._until = 0.0

    def cooling(self, now: float) -> bool:
        return now < self._until

    def remaining(self, now: float) -> float:
        """Seconds left of the cool-down (0 when none)."""
        return max(0.0, self._until - now)


@dataclass
class MatchGate:
    """Holds prompts off the match after a slow one; a fast match ends the hold (``replay.match_gate``)."""

    first_s: float = HOLD_FIRST_S
    max_s: float = HOLD_MAX_S
    _until: float = 0.0
    _hold_s: float = 0.0

    def slow(self, now: float) -> float:
        """A match was slower than ``BIR_MATCH_SLOW_MS`` (or never came): hold, longer each time. Returns the hold."""
        self._hold_s = self.first_s if self._hold_s <= 0 else min(self._hold_s * 2, self.max_s)
        self._until = now + self._hold_s
        return self._hold_s

    def fast(self) -> bool:
        """A match came quickly: the hold ends. True if there was one."""
        held = self._hold_s > 0
        self._until, self._hold_s = 0.0, 0.0
        return held

    def held(self, now: float) -> bool:
        return now < self._until
