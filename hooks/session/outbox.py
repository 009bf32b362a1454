"""The durable outbox: every request the control server owes the service after the prompt.

A hook never waits on the network: the controller enqueues a recorded step, a run's finish or an
execution report (a quick local file write) and one sender task delivers them. Items are files under
``<BIR_HOME>/outbox/<project key>/`` (directory 0700, files 0600, written atomically), so nothing is
lost when the control server restarts or the service is down, and nothing is doubled: a ledger of
tickets (``tickets.json``) makes a second report for a ticket a no-op across concurrent calls, retries
and restarts. The rules (order, retry, bounds, drafts) live in ``bir.hooks.session.outbox_state``; this module
is their file and HTTP driver.

The enqueue methods are synchronous and meant to be called on the control server's event loop: each
runs to completion without yielding, so two hooks racing on one ticket (``Stop`` and ``SessionEnd``)
cannot both pass the ledger check. A lock file guards the ledger against a second process on the same
directory (an old server still draining while a new one starts).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import msgspec

from bir.core import config
from bir.core.atomic import write_atomic
from bir.core.home_files import open_private, private_dir, read_private
from bir.core.log import log_event
from bir.core.service import ServiceClient, ServiceError
from bir.hooks.discovery import discovery_key
from bir.hooks.session.outbox_state import (
    Item,
    Kind,
    Policy,
    TicketLedger,
    after_failure,
    backoff_s,
    classify_error,
    expired,
    next_sendable,
    next_wake,
    outgoing,
    over_bounds,
    ripe_drafts,
)

LEDGER_FILE: Final = "tickets.json"
_LOCK_FILE: Final = ".lock"
# The ticket ledger is pruned on every write; past this it is not ours.
_MAX_LEDGER_BYTES: Final = 16 * 1024 * 1024
_ITEM_GLOB: Final = "s*.json"
# The loop looks again at least this often: for drafts another instance left and for clock jumps.
_IDLE_POLL_S: Final = 60.0
_encoder = msgspec.json.Encoder()
_item_decoder = msgspec.json.Decoder(Item)


def outbox_dir(project_dir: str | os.PathLike[str], home: Path | None = None) -> Path:
    """``<BIR_HOME>/outbox/<project key>``: the key is the discovery file's, so one project has one outbox."""
    return (home if home is not None else config.home()) / "outbox" / discovery_key(project_dir)


def _write_atomic(path: Path, data: bytes) -> None:
    # Not durable: the outbox survives a crash of the control server, which is what it is for;
    # surviving a crash of the machine is not worth a disk flush on every tool call.
    write_atomic(path, data, durable=False)


class Outbox:
    """The outbox of one project, over ``service``. See the module's docstring.

    ``clock`` is wall-clock seconds (stored times survive a restart); ``cooldown`` (optional) answers
    how many seconds the service is still cooling down after a failure seen elsewhere (the match),
    and nothing is sent before it says 0. Opening reads the pending items and the ledger, and makes
    sendable the drafts older than ``policy.draft_max_age_s`` (their turn's server died).

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(
        self,
        directory: Path,
        service: ServiceClient,
        *,
        policy: Policy | None = None,
        clock: Callable[[], float] = time.time,
        cooldown: Callable[[], float] | None = None,
    ) -> None:
        self.directory = directory
        self.service = service
        self.policy = policy or Policy()
        self._clock = clock
        self._cooldown = cooldown
        self.instance = secrets.token_hex(8)
        private_dir(directory.parent.parent, directory.parent.name, directory.name)
        self._items: dict[str, tuple[Item, int]] = {}
        self._seq = 0
        self._failures = 0
        self._cool_until = 0.0
        self._closed = False
        self._wake: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._last_draft_check = 0.0
        self._load()
        with self._locked():
            self._ledger = self._read_ledger()
        self._age_drafts(self._clock())

    @classmethod
    def for_project(cls, project_dir: str | os.PathLike[str], service: ServiceClient, **kwargs: Any) -> Outbox:
        """The outbox of ``project_dir`` under ``BIR_HOME``.

        Raises:
            OSError: the directory cannot be created or read.
        """
        return cls(outbox_dir(project_dir), service, **kwargs)

    # --- state on disk ----------------------------------------------------------------------------

    def _path(self, item: Item) -> Path:
        return self.directory / f"s{item.seq:012d}-{item.kind}-{item.id}.json"

    def _load(self) -> None:
        for path in sorted(self.directory.glob(_ITEM_GLOB)):
            try:
                data = read_private(path, self.policy.max_item_bytes)
                item = _item_decoder.decode(data)
            except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                # Kept aside, not deleted: bad input loses nothing, and it is never read again.
                log_event("outbox.item_unreadable", path=str(path), error=str(exc)[:300])
                with contextlib.suppress(OSError):
                    path.rename(path.with_suffix(".bad"))
                continue
            self._items[item.id] = (item, len(data))
            self._seq = max(self._seq, item.seq)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = open_private(self.directory / _LOCK_FILE, "update")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_ledger(self) -> TicketLedger:
        path = self.directory / LEDGER_FILE
        try:
            data = msgspec.json.decode(read_private(path, _MAX_LEDGER_BYTES))
        except FileNotFoundError:
            return TicketLedger()
        except (OSError, msgspec.DecodeError) as exc:
            log_event("outbox.ledger_unreadable", path=str(path), error=str(exc)[:300])
            return TicketLedger()
        return TicketLedger.from_wire(data)

    def _write_ledger(self) -> None:
        pending = frozenset(i.ticket for i, _ in self._items.values() if i.ticket is not None)
        self._ledger.prune(self._clock(), self.policy, pending)
        _write_atomic(self.directory / LEDGER_FILE, _encoder.encode(self._ledger.to_wire()))

    def _put(self, item: Item) -> bool:
        try:
            data = _encoder.encode(item)
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            log_event("outbox.item_unencodable", kind=item.kind, run_id=item.run_id, error=str(exc)[:300])
            return False
        if len(data) > min(self.policy.max_item_bytes, self.policy.max_bytes):
            log_event("outbox.item_too_large", kind=item.kind, run_id=item.run_id, bytes=len(data))
            return False
        old = self._items.get(item.id)
        self._items[item.id] = (item, len(data))
        try:
            _write_atomic(self._path(item), data)
        except OSError as exc:
            # Still sent from memory; only its survival of a restart is lost.
            log_event("outbox.write_failed", kind=item.kind, error=str(exc)[:300])
        if old is None:
            for dropped in over_bounds(self._items, self.policy):
                self._remove(dropped)
                log_event(
                    "outbox.dropped",
                    reason="bounds",
                    kind=dropped.kind,
                    run_id=dropped.run_id,
                    ticket=dropped.ticket,
                )
        self._notify()
        return item.id in self._items

    def _remove(self, item: Item) -> None:
        self._items.pop(item.id, None)
        with contextlib.suppress(FileNotFoundError):
            self._path(item).unlink()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _new(self, kind: Kind, body: Mapping[str, Any], **fields: Any) -> Item:
        self._seq += 1
        now = self._clock()
        return Item(
            id=secrets.token_hex(8), seq=self._seq, kind=kind, body=dict(body), created_at=now, next_at=now, **fields
        )

    # --- enqueue ----------------------------------------------------------------------------------

    def enqueue_step(self, run_id: str, step_index: int, body: Mapping[str, Any]) -> bool:
        """Queue ``POST /recordings/runs/:run_id/steps``; returns whether it was queued."""
        return self._put(self._new("step", body, run_id=run_id, step_index=step_index))

    def enqueue_finish(self, run_id: str, body: Mapping[str, Any]) -> bool:
        """Queue ``POST /recordings/runs/:run_id/finish``, sent after every step queued before it."""
        return self._put(self._new("finish", body, run_id=run_id))

    def enqueue_report(self, scenario_id: str, ticket: str, body: Mapping[str, Any]) -> bool:
        """Queue the execution report that redeems ``ticket``; a no-op for a ticket already enqueued.

        Returns whether this call queued it.
        """
        fields = _report(scenario_id, ticket)
        return self._claim(ticket, lambda: self._new("report", {**body, "ticket": ticket}, **fields))

    def draft_report(self, ticket: str, scenario_id: str, body: Mapping[str, Any]) -> bool:
        """Persist the report of an armed or declined match at arm time, held back (not sent).

        ``body`` is its floor (``not_steered``, ``measured: false``): what gets booked if this turn's
        server dies before ``finalize_report``. A no-op for a ticket already enqueued.
        """
        fields = {**_report(scenario_id, ticket), "draft": True, "owner": self.instance}
        return self._claim(ticket, lambda: self._new("report", {**body, "ticket": ticket}, **fields))

    def finalize_report(self, ticket: str, body: Mapping[str, Any] | None, *, scenario_id: str | None = None) -> bool:
        """Replace ``ticket``'s draft with the final ``body`` and make it sendable.

        ``body`` None means the turn has nothing worth booking (the 202 rule): the draft is dropped and
        the ticket stays redeemed here. With no draft, a ``scenario_id`` enqueues ``body`` as a new report
        (unless the ticket was already enqueued). Returns whether a report is now queued by this call.
        """
        draft = next((i for i, _ in self._items.values() if i.ticket == ticket and i.draft), None)
        if draft is None:
            if body is None or scenario_id is None:
                return False
            return self.enqueue_report(scenario_id, ticket, body)
        if body is None:
            self._remove(draft)
            log_event("service.report_settled", scenario_id=draft.scenario_id, ticket=ticket, status="not_sent")
            self._notify()
            return False
        now = self._clock()
        final = msgspec.structs.replace(draft, body={**body, "ticket": ticket}, draft=False, next_at=now)
        return self._put(final)

    def _claim(self, ticket: str, make: Callable[[], Item]) -> bool:
        with self._locked():
            # Another process on this directory may have claimed it since this one read the ledger.
            self._ledger.merge(self._read_ledger())
            if ticket in self._ledger:
                log_event("outbox.report_duplicate", ticket=ticket)
                return False
            self._ledger.add(ticket, self._clock())
            try:
                self._write_ledger()
            except OSError as exc:
                log_event("outbox.write_failed", kind="ledger", error=str(exc)[:300])
        return self._put(make())

    # --- inspection -------------------------------------------------------------------------------

    def pending(self) -> list[Item]:
        """Every item not yet settled (drafts included), oldest first."""
        return sorted((i for i, _ in self._items.values()), key=lambda i: i.seq)

    def redeemed(self, ticket: str) -> bool:
        """True when a report for ``ticket`` was enqueued here (sent, pending, or dropped)."""
        return ticket in self._ledger

    @property
    def cooling_s(self) -> float:
        """Seconds before the sender tries the service again after a failure (0 when it is not waiting)."""
        own = max(0.0, self._cool_until - time.monotonic())
        other = self._cooldown() if self._cooldown is not None else 0.0
        return max(own, other if math.isfinite(other) else _IDLE_POLL_S)

    # --- the sender -------------------------------------------------------------------------------

    def _age_drafts(self, now: float) -> None:
        self._last_draft_check = now
        for item in ripe_drafts((i for i, _ in self._items.values()), now, self.instance, self.policy):
            log_event("outbox.draft_aged", scenario_id=item.scenario_id, ticket=item.ticket)
            self._put(item)
        for item, _ in list(self._items.values()):
            if expired(item, now, self.policy):
                self._remove(item)
                log_event("outbox.dropped", reason="expired", kind=item.kind, run_id=item.run_id, ticket=item.ticket)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send items until ``close``; one request at a time, in order per run, never during a cool-down."""
        task_status.started()
        while not self._closed:
            self._wake = anyio.Event()
            now = self._clock()
            if now - self._last_draft_check >= _IDLE_POLL_S or now < self._last_draft_check:
                self._age_drafts(now)
            cooling = self.cooling_s
            items = [i for i, _ in self._items.values()]
            item = next_sendable(items, now) if cooling <= 0 else None
            if item is not None:
                await self._send(item)
                continue
            wake = next_wake(items)
            delay = _IDLE_POLL_S if wake is None else max(0.0, wake - now)
            with anyio.move_on_after(max(cooling, min(delay, _IDLE_POLL_S))):
                await self._wake.wait()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Outbox]:
        """Run the sender for the block's duration (``async with outbox.running(): ...``)."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.run)
            try:
                yield self
            finally:
                self.close()
                tg.cancel_scope.cancel()

    async def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every sendable item to settle; returns whether none is left.

        It sends nothing itself and retries nothing early: the sender (``run``) must be running.
        """
        with anyio.move_on_after(timeout_s):
            while outgoing(i for i, _ in self._items.values()):
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
        return not outgoing(i for i, _ in self._items.values())

    def close(self) -> None:
        """Stop the sender after its current request; pending items stay on disk for the next start."""
        self._closed = True
        self._notify()

    async def _send(self, item: Item) -> None:
        if not (item.scenario_id if item.kind == "report" else item.run_id):
            self._failed(item, "rejected", "the item names no run or scenario", None)
            return
        try:
            await self._deliver(item)
        except ServiceError as exc:
            self._failed(item, classify_error(exc), str(exc), exc.status)
        except Exception as exc:  # noqa: BLE001 - one bad item must not stop the sender; it retries and expires
            self._failed(item, "retry", f"{type(exc).__name__}: {exc}", None)
        else:
            self._failures = 0
            self._cool_until = 0.0
        self._notify()

    async def _deliver(self, item: Item) -> None:
        if item.kind == "report":
            report = await self.service.report_execution(item.scenario_id or "", item.body)
            self._remove(item)
            log_event("service.report_settled", scenario_id=item.scenario_id, ticket=item.ticket, status=report.status)
            return
        run_id = item.run_id or ""
        if item.kind == "step":
            step = await self.service.post_step(run_id, item.body)
            self._remove(item)
            log_event("recording.step_sent", run_id=run_id, step_index=item.step_index, status=step.status)
            unknown = step.status == "unknown_run"
        else:
            finish = await self.service.finish_run(run_id, item.body)
            self._remove(item)
            log_event("recording.finish_sent", run_id=run_id, status=finish.status)
            unknown = finish.status == "unknown_run"
        if unknown:
            self._drop_run(run_id)

    def _drop_run(self, run_id: str) -> None:
        # The service has no such run (a hit, or a run it forgot): every later post would 404 too.
        doomed = [i for i, _ in self._items.values() if i.run_id == run_id]
        for item in doomed:
            self._remove(item)
        log_event("recording.run_unknown", run_id=run_id, dropped=len(doomed))

    def _failed(self, item: Item, verdict: str, error: str, status: int | None) -> None:
        now = self._clock()
        if verdict != "retry":
            self._remove(item)
            log_event("outbox.dropped", reason="rejected", kind=item.kind, run_id=item.run_id, ticket=item.ticket,
                      status=status, error=error)  # fmt: skip
            return
        self._failures += 1
        self._cool_until = time.monotonic() + backoff_s(self._failures, self.policy)
        retried = after_failure(item, now, self.policy)
        if retried is None:
            self._remove(item)
            log_event("outbox.dropped", reason="expired", kind=item.kind, run_id=item.run_id, ticket=item.ticket,
                      attempts=item.attempts + 1, error=error)  # fmt: skip
            return
        if item.id in self._items:
            self._put(retried)
        log_event("outbox.retry", kind=item.kind, run_id=item.run_id, attempts=retried.attempts,
                  in_s=round(retried.next_at - now, 3), error=error)  # fmt: skip


def _report(scenario_id: str, ticket: str) -> dict[str, Any]:
    return {"scenario_id": scenario_id, "ticket": ticket}
