"""Bodies that overran their limits recently, refused at once with the message they failed with."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

REFUSE_FOR_S: Final = 600.0
MAX_ENTRIES: Final = 4096


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    message: str
    until: float


class RefusalLedger:
    """Keyed by the hash of a body and its kind; bounded, oldest dropped first."""

    def __init__(
        self,
        refuse_for_s: float = REFUSE_FOR_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._for = refuse_for_s
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, Refusal] = OrderedDict()

    def record(self, key: str, reason: str, message: str) -> None:
        self._entries.pop(key, None)
        self._entries[key] = Refusal(reason=reason, message=message, until=self._clock() + self._for)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def check(self, key: str) -> Refusal | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.until <= self._clock():
            del self._entries[key]
            return None
        return entry

    def __len__(self) -> int:
        return len(self._entries)
