"""The outbox's rules, without files or HTTP: what to send next, when to retry, what to drop.

An item is one request the control server owes the service after the prompt: a recorded step, a
run's finish, or an execution report. The driver (``bir.hooks.session.outbox``) persists items and sends
them; every decision it takes is one of the pure functions here, so each can be tested with values:

- Order: a run's recording items go out one at a time in the order they were enqueued (its steps
  before its finish); reports are independent of each other and of runs. A draft report is never sent.
- Retry: a transient failure (no answer, a timeout, 5xx, 408, 429) is retried with capped exponential
  backoff until the item reaches its maximum attempts or age; anything else is a final answer.
- Bounds: past the outbox's count or size, the oldest recording items are dropped first; reports go
  last, because a report is money on the service and a step is only a sample.
- Tickets: a ledger of tickets already enqueued makes a second report for one ticket a no-op; it is
  pruned by age and count, never while the ticket's report is still pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from bir.core.service import ServiceError

Kind = Literal["step", "finish", "report"]
Verdict = Literal["retry", "rejected"]

RECORDING_KINDS: Final = frozenset({"step", "finish"})
_TRANSIENT_STATUSES: Final = frozenset({408, 429})


class Item(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One pending request. ``seq`` orders items across restarts; times are wall-clock seconds.

    A step or finish names its ``run_id`` (and a step its ``step_index``); a report names its
    ``scenario_id`` and ``ticket``. A ``draft`` report is held, not sent, until it is finalized or
    aged; ``owner`` is the outbox instance that drafted it.
    """

    id: str
    seq: int
    kind: Kind
    body: dict[str, Any]
    created_at: float
    attempts: int = 0
    next_at: float = 0.0
    run_id: str | None = None
    step_index: int | None = None
    scenario_id: str | None = None
    ticket: str | None = None
    draft: bool = False
    owner: str | None = None


@dataclass(frozen=True)
class Policy:
    """The outbox's bounds and retry schedule."""

    max_items: int = 5_000
    max_bytes: int = 64 * 1024 * 1024
    # One item past this is refused at enqueue: the recorder caps a step's output far below it.
    max_item_bytes: int = 2 * 1024 * 1024
    max_attempts: int = 40
    max_age_s: float = 24 * 3600.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    # A draft whose turn's server died is sent as it is after this long (its floor outcome).
    draft_max_age_s: float = 30 * 60.0
    ledger_max_tickets: int = 10_000
    ledger_max_age_s: float = 30 * 24 * 3600.0


def classify_error(exc: ServiceError) -> Verdict:
    """``retry`` for a failure that may pass (no answer, a timeout, 5xx, 408, 429), else ``rejected``."""
    if exc.kind in ("timeout", "unreachable"):
        return "retry"
    if exc.kind == "status" and exc.status is not None and (exc.status >= 500 or exc.status in _TRANSIENT_STATUSES):
        return "retry"
    return "rejected"


def backoff_s(failures: int, policy: Policy) -> float:
    """The wait after the ``failures``-th failure in a row: base, doubled each time, capped."""
    if failures <= 0:
        return 0.0
    return float(min(policy.backoff_cap_s, policy.backoff_base_s * 2.0 ** min(failures - 1, 62)))


def after_failure(item: Item, now: float, policy: Policy) -> Item | None:
    """The item rescheduled after a transient failure, or None when it is out of attempts or too old."""
    attempts = item.attempts + 1
    if attempts >= policy.max_attempts or now - item.created_at >= policy.max_age_s:
        return None
    return msgspec.structs.replace(item, attempts=attempts, next_at=now + backoff_s(attempts, policy))


def expired(item: Item, now: float, policy: Policy) -> bool:
    """True when an item waited past the outbox's maximum age (drafts included: nothing waits for ever)."""
    return now - item.created_at >= policy.max_age_s


def _heads(items: Iterable[Item]) -> list[Item]:
    """The items that may go next: every report, and each run's earliest recording item."""
    first_of_run: dict[str, Item] = {}
    heads: list[Item] = []
    for item in items:
        if item.kind == "report":
            heads.append(item)
        elif item.run_id is not None:
            held = first_of_run.get(item.run_id)
            if held is None or item.seq < held.seq:
                first_of_run[item.run_id] = item
    heads.extend(first_of_run.values())
    return [item for item in heads if not item.draft]


def next_sendable(items: Iterable[Item], now: float) -> Item | None:
    """The oldest item that may be sent at ``now``, or None."""
    due = [item for item in _heads(items) if item.next_at <= now]
    return min(due, key=lambda item: item.seq) if due else None


def next_wake(items: Iterable[Item]) -> float | None:
    """When the earliest item that waits on its backoff becomes due, or None when nothing will be."""
    heads = _heads(items)
    return min(item.next_at for item in heads) if heads else None


def outgoing(items: Iterable[Item]) -> bool:
    """True while some item is still to be sent (drafts are not: they wait for their turn to seal)."""
    return any(not item.draft for item in items)


def over_bounds(sizes: Mapping[str, tuple[Item, int]], policy: Policy) -> list[Item]:
    """The items to drop so the outbox fits its bounds: oldest recording items first, then oldest reports.

    ``sizes`` maps an item's id to the item and its size in bytes.
    """
    count = len(sizes)
    total = sum(size for _, size in sizes.values())
    if count <= policy.max_items and total <= policy.max_bytes:
        return []
    order = sorted(sizes.values(), key=lambda pair: (pair[0].kind == "report", pair[0].seq))
    dropped: list[Item] = []
    for item, size in order:
        if count <= policy.max_items and total <= policy.max_bytes:
            break
        dropped.append(item)
        count -= 1
        total -= size
    return dropped


def ripe_drafts(items: Iterable[Item], now: float, owner: str, policy: Policy) -> list[Item]:
    """Drafts another outbox instance left behind, old enough that their turn will never seal them.

    Each is returned made sendable as it is (its floor outcome, unmeasured).
    """
    return [
        msgspec.structs.replace(item, draft=False, next_at=now)
        for item in items
        if item.draft and item.owner != owner and now - item.created_at >= policy.draft_max_age_s
    ]


class TicketLedger:
    """Tickets whose report was enqueued (and maybe sent): each is redeemed at most once from here."""

    def __init__(self, entries: Mapping[str, float] | None = None) -> None:
        self._entries: dict[str, float] = dict(entries or {})

    def __contains__(self, ticket: object) -> bool:
        return ticket in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, ticket: str, now: float) -> None:
        self._entries.setdefault(ticket, now)

    def merge(self, other: TicketLedger) -> None:
        """Take in ``other``'s tickets (another process's view of the same ledger), keeping the older time."""
        for ticket, at in other._entries.items():
            self._entries[ticket] = min(at, self._entries.get(ticket, at))

    def prune(self, now: float, policy: Policy, pending: frozenset[str] = frozenset()) -> bool:
        """Forget tickets older than the ledger's age, then the oldest past its count; never a pending one.

        Returns whether anything was forgotten.
        """
        before = len(self._entries)
        kept = {t: at for t, at in self._entries.items() if t in pending or now - at < policy.ledger_max_age_s}
        if len(kept) > policy.ledger_max_tickets:
            ordered = sorted(kept.items(), key=lambda pair: (pair[0] not in pending, -pair[1]))
            kept = dict(ordered[: max(policy.ledger_max_tickets, len(pending))])
        self._entries = kept
        return len(kept) != before

    def to_wire(self) -> dict[str, Any]:
        return {"version": 1, "tickets": dict(self._entries)}

    @classmethod
    def from_wire(cls, data: object) -> TicketLedger:
        """A ledger from its stored form; entries that are not ``ticket: seconds`` are skipped."""
        tickets = data.get("tickets") if isinstance(data, dict) else None
        if not isinstance(tickets, dict):
            return cls()
        return cls(
            {
                t: float(at)
                for t, at in tickets.items()
                if isinstance(t, str) and isinstance(at, int | float) and not isinstance(at, bool)
            }
        )
