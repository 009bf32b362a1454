"""The local store: one SQLite file under ``<BIR_HOME>/local/store.db`` for all of a user's projects.

What it promises, and how:

- **Several processes at once** (one control server per project): WAL, a ``busy_timeout``, and every
  write in a short ``BEGIN IMMEDIATE`` transaction, so writers queue instead of failing and readers
  never wait on them.
- **Nothing lost, nothing doubled when a process dies mid-write**: a write is one transaction, committed
  whole or not at all; a ticket is redeemed by inserting its row into ``executions``, whose primary key
  is the ticket, so a second booking is refused by the database and never by a read-then-write.
- **Never somebody else's file**: a file that is not SQLite, or a SQLite file with another
  ``application_id``, is refused with a message that names it; one that fails ``quick_check`` is
  refused as corrupt. Neither is ever written to. A store from a newer bir is refused too.
- **Never through a planted link**: the folder is made and checked by ``core.home_files.private_dir``
  (0700, this user's); the store and its ``-wal``/``-shm``/``-journal`` files must be regular files of
  this user with no other name (a symlink, a FIFO or a hard link is refused in one line) before SQLite
  opens them by name, and the store is the same file after it did.
- **Bounded**: ``prune`` removes the oldest runs (those no ready scenario rests on first) until the
  store's recorded bytes are under its limit (``BIR_LOCAL_STORE_MB``).
- **A full disk** raises ``StoreFull``: the route answers 503 and the outbox tries again later.

The class is synchronous and thread-safe (one connection, one lock); the service calls it from worker
threads so the event loop never waits on the disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from bir.core.home_files import HomeError, open_private, private_dir
from bir.hooks.local import schema

SQLITE_HEADER: Final = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS: Final = 10_000
# Tickets live this long: the outbox retries a report for up to a day, a draft is booked after 30 minutes.
TICKET_TTL_S: Final = 7 * 24 * 3600
# Pruning brings the store under this share of its limit, so it does not prune again at the next run.
PRUNE_TO: Final = 0.9
# A run with no finish yet is being recorded (its outbox tries for up to a day): pruning leaves it this long.
OPEN_RUN_KEPT_S: Final = 24 * 3600
EXPORT_FORMAT: Final = "bir-local-store"

T = TypeVar("T")
FinishStatus = Literal["finished", "duplicate", "unknown_run"]
BookStatus = Literal["booked", "duplicate", "ticket_unknown"]
StepStatus = Literal["open", "finished", "unknown_run"]


class StoreError(Exception):
    """The store cannot be used; the message says why and what to do, and names the file."""


class StoreFull(StoreError):
    """The disk (or the store's page limit) is full: nothing was written; try again later."""


class StoreBusy(StoreError):
    """Another process held the store longer than the busy timeout: nothing was written."""


@dataclass(frozen=True)
class RunRow:
    id: str
    project: str
    input: str
    framework: str
    metadata: dict[str, Any]
    origin: str
    created_at: float
    finished_at: float | None
    finish: dict[str, Any] | None


@dataclass(frozen=True)
class StepRow:
    step_index: int
    tool_name: str
    body: dict[str, Any]


@dataclass(frozen=True)
class ScenarioRow:
    id: str
    project: str
    run_id: str | None
    state: str
    reason: dict[str, Any] | None
    body: dict[str, Any]
    template: dict[str, Any] | None
    normalized: str | None
    embedding: bytes | None
    chain_revision: int
    calc_version: int
    changed: int
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class TicketRow:
    ticket: str
    scenario_id: str
    run_id: str | None
    project: str
    prompt: str
    rule: str
    similarity: float
    params: dict[str, Any]
    issued_at: float


@dataclass(frozen=True)
class EditRow:
    id: str
    scenario_id: str
    seq: int
    kind: str
    step_index: int | None
    entry: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True)
class ImportedRun:
    """A finished run written whole: a turn read from a transcript."""

    id: str
    project: str
    input: str
    metadata: Mapping[str, Any]
    created_at: float
    finished_at: float
    steps: Sequence[Mapping[str, Any]]
    finish: Mapping[str, Any]
    origin: str = "transcript"
    framework: str = ""


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _translate(exc: sqlite3.Error, path: Path) -> StoreError:
    message = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "database or disk is full" in message:
        return StoreFull(f"the local store {path} is full (the disk or its page limit): {message}")
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in message:
        return StoreBusy(f"the local store {path} stayed locked by another process: {message}")
    return StoreError(f"the local store {path} failed: {message}")


def default_path(home: Path) -> Path:
    """``<BIR_HOME>/local/store.db``."""
    return home / "local" / "store.db"


# SQLite's own files beside the store: each is opened by SQLite by name, so each is checked first.
SIDECARS: Final = ("-wal", "-shm", "-journal")


def _refusal(exc: OSError, path: Path) -> StoreError:
    if isinstance(exc, HomeError):
        return StoreError(f"the local store cannot be used: {exc}")
    return StoreError(f"the local store {path} cannot be opened: {exc.strerror or exc}")


def _open_file(path: Path) -> tuple[int, bool]:
    """``path`` opened for reading without following a link or blocking on a FIFO (a regular file of this
    user), created 0600 when missing; and whether it was created."""
    try:
        try:
            return open_private(path, "read"), False
        except FileNotFoundError:
            try:
                return open_private(path, "new"), True
            except FileExistsError:
                return open_private(path, "read"), False  # made meanwhile by another process: checked alike
    except OSError as exc:
        raise _refusal(exc, path) from None


def _inspect(fd: int, path: Path, created: bool) -> os.stat_result:
    """Refuse a file that is not ours before SQLite touches it (opening may create a WAL beside it)."""
    try:
        info = os.fstat(fd)
        header = b"" if created else os.pread(fd, 100, 0)
    except OSError as exc:
        raise _refusal(exc, path) from None
    if info.st_nlink > 1:
        raise StoreError(f"{path} has other names (hard links); bir writes only files of its own")
    if header and not header.startswith(SQLITE_HEADER):
        raise StoreError(
            f"{path} is not a bir store (not an SQLite database); bir leaves it as it is. "
            "Move it aside and bir starts a new store there."
        )
    if len(header) >= 72:
        app_id = int.from_bytes(header[68:72], "big")
        if app_id not in (0, schema.APPLICATION_ID):
            raise StoreError(
                f"{path} is another program's SQLite database (application_id {app_id:#x}), not a bir store; "
                "bir leaves it as it is. Move it aside and bir starts a new store there."
            )
    return info


def _claim(path: Path) -> tuple[int, os.stat_result]:
    """The store file's descriptor and what it is, checked (``_open_file``, ``_inspect``)."""
    fd, created = _open_file(path)
    try:
        return fd, _inspect(fd, path, created)
    except BaseException:
        os.close(fd)
        raise


def _check_sidecars(path: Path) -> None:
    """Refuse a WAL, shared-memory or journal file beside the store that is not a regular file of this user:
    SQLite would open (and write) whatever a planted link points to."""
    for suffix in SIDECARS:
        side = path.with_name(path.name + suffix)
        try:
            info = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _refusal(exc, side) from None
        if stat.S_ISLNK(info.st_mode):
            raise StoreError(f"{side} is a symbolic link; bir does not follow links in its home. Remove it.")
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{side} is not a regular file; move it away and bir makes its own")
        if info.st_uid != os.geteuid():
            raise StoreError(
                f"{side} is owned by another user (uid {info.st_uid}); bir keeps its state only in its own files"
            )
        if info.st_nlink > 1:
            raise StoreError(f"{side} has other names (hard links); bir writes only files of its own")


# The store files this process has open through SQLite ((st_dev, st_ino) -> how many Stores): closing any
# descriptor of a file drops every POSIX lock the process holds on it, SQLite's included, so a file already open
# here is checked by its name alone and never opened again outside SQLite (two writers would corrupt it).
_OPEN_HERE: dict[tuple[int, int], int] = {}
_OPEN_LOCK = threading.Lock()


def _open_here(path: Path) -> os.stat_result | None:
    """``path``'s ``lstat`` when this process has it open already (checked as ``_inspect`` checks, but for
    its header, which SQLite has read); None when it has not."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    with _OPEN_LOCK:
        if _OPEN_HERE.get((info.st_dev, info.st_ino), 0) <= 0:
            return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink > 1:
        raise StoreError(f"{path} changed while bir had it open (a link, another owner or other names); bir leaves it")
    return info


def _same_file(path: Path, info: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(now.st_mode) and (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)


class Store:
    """The local store at ``path``; see the module's docstring.

    Raises:
        StoreError: the file is not a bir store, is corrupt, is from a newer bir, or cannot be opened.
    """

    def __init__(self, path: Path, *, max_page_count: int | None = None) -> None:
        self.path = path
        # The folder is this user's alone (0700, checked), so nobody else can plant a file in it once the
        # checks below have passed; Python's sqlite3 cannot pass SQLITE_OPEN_NOFOLLOW, so they come first.
        try:
            private_dir(path.parent)
        except OSError as exc:
            raise _refusal(exc, path.parent) from None
        known = _open_here(path)
        if known is not None:
            info = known
            _check_sidecars(path)
        else:
            fd, info = _claim(path)
            try:
                _check_sidecars(path)
                if stat.S_IMODE(info.st_mode) & 0o077:
                    with contextlib.suppress(OSError):
                        os.fchmod(fd, 0o600)
            finally:
                # Closed before SQLite opens the file, never after (see _OPEN_HERE).
                os.close(fd)
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _translate(exc, path) from None
        if not _same_file(path, info):
            conn.close()
            raise StoreError(f"{path} was replaced while bir opened it; bir leaves it as it is")
        self._conn = conn
        self._lock = threading.RLock()
        try:
            self._prepare(max_page_count)
        except BaseException:
            conn.close()
            raise
        self._key: tuple[int, int] | None = (info.st_dev, info.st_ino)
        with _OPEN_LOCK:
            _OPEN_HERE[self._key] = _OPEN_HERE.get(self._key, 0) + 1

    # --- opening ----------------------------------------------------------------------------------

    def _prepare(self, max_page_count: int | None) -> None:
        conn = self._conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{self.path} cannot be read as a bir store ({exc}); bir leaves it as it is. "
                "Move it aside and bir starts a new store there."
            ) from None
        if app_id not in (0, schema.APPLICATION_ID) or (app_id == 0 and tables > 0):
            raise StoreError(
                f"{self.path} is another program's SQLite database, not a bir store; bir leaves it as it is. "
                "Move it aside and bir starts a new store there."
            )
        if version > schema.CURRENT_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer bir (store version {version}, this bir knows "
                f"{schema.CURRENT_VERSION}); upgrade bir, or point BIR_HOME elsewhere."
            )
        if tables > 0:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreError(
                    f"{self.path} is a corrupt bir store (quick_check: {str(check)[:200]}); bir leaves it as it "
                    "is. Move it aside (keep it if you want to try `sqlite3 .recover`) and bir starts a new store."
                )
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: the store needs WAL mode, SQLite answered {mode!r}")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            if max_page_count is not None:
                conn.execute(f"PRAGMA max_page_count = {int(max_page_count)}")
            self._migrate()
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from None

    def _migrate(self) -> None:
        conn = self._conn
        if not schema.pending(conn.execute("PRAGMA user_version").fetchone()[0]):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again inside the lock: another process may have migrated since.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for target, statements in schema.pending(version):
                for statement in statements:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target}")
            conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            key, self._key = self._key, None
        if key is not None:
            with _OPEN_LOCK:
                left = _OPEN_HERE.get(key, 0) - 1
                if left > 0:
                    _OPEN_HERE[key] = left
                else:
                    _OPEN_HERE.pop(key, None)

    # --- transactions -----------------------------------------------------------------------------

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from None

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from None
            try:
                result = fn(conn)
                conn.execute("COMMIT")
                return result
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc, self.path) from None
                raise

    @staticmethod
    def _bump(conn: sqlite3.Connection, key: str) -> int:
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = ?", (key,))
        return int(conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0])

    def counters(self) -> tuple[int, int]:
        """``(changed, generation)``: the first moves with every scenario written, the second with every removal."""

        def read(conn: sqlite3.Connection) -> tuple[int, int]:
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            return int(rows.get("changed", 0)), int(rows.get("generation", 0))

        return self._read(read)

    # --- runs and steps ---------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        project: str,
        input: str,
        framework: str = "",
        metadata: Mapping[str, Any] | None = None,
        origin: str = "live",
        now: float | None = None,
    ) -> bool:
        """Create the run ``run_id``; False when it exists already (then nothing changes)."""
        meta = _dumps(dict(metadata or {}))
        stamp = time.time() if now is None else now

        def write(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO runs (id, project, input, framework, metadata, origin, created_at, bytes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, project, input, framework, meta, origin, stamp, len(input) + len(meta)),
            )
            return cursor.rowcount == 1

        return self._write(write)

    def add_step(self, run_id: str, step_index: int, tool_name: str, body: Mapping[str, Any]) -> StepStatus:
        """Store one step of ``run_id`` (the last post of an index wins): ``open`` or ``finished`` (the run was
        sealed already: a step can settle after its turn's finish), ``unknown_run`` when there is no such run."""
        text = _dumps(dict(body))

        def write(conn: sqlite3.Connection) -> StepStatus:
            found = conn.execute("SELECT finish IS NOT NULL FROM runs WHERE id = ?", (run_id,)).fetchone()
            if found is None:
                return "unknown_run"
            old = conn.execute(
                "SELECT bytes FROM steps WHERE run_id = ? AND step_index = ?", (run_id, step_index)
            ).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO steps (run_id, step_index, tool_name, body, bytes) VALUES (?, ?, ?, ?, ?)",
                (run_id, step_index, tool_name, text, len(text)),
            )
            delta = len(text) - (old[0] if old else 0)
            conn.execute("UPDATE runs SET bytes = bytes + ? WHERE id = ?", (delta, run_id))
            return "finished" if found[0] else "open"

        return self._write(write)

    def finish_run(self, run_id: str, body: Mapping[str, Any], *, now: float | None = None) -> FinishStatus:
        """Seal ``run_id`` with its finish body, once."""
        text = _dumps(dict(body))
        stamp = time.time() if now is None else now

        def write(conn: sqlite3.Connection) -> FinishStatus:
            row = conn.execute("SELECT finish FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return "unknown_run"
            if row[0] is not None:
                return "duplicate"
            conn.execute(
                "UPDATE runs SET finish = ?, finished_at = ?, bytes = bytes + ? WHERE id = ?",
                (text, stamp, len(text), run_id),
            )
            return "finished"

        return self._write(write)

    @staticmethod
    def _run_row(row: Sequence[Any]) -> RunRow:
        return RunRow(
            id=row[0],
            project=row[1],
            input=row[2],
            framework=row[3],
            metadata=_loads(row[4]) or {},
            origin=row[5],
            created_at=row[6],
            finished_at=row[7],
            finish=_loads(row[8]),
        )

    _RUN_COLUMNS: Final = "id, project, input, framework, metadata, origin, created_at, finished_at, finish"

    def run(self, run_id: str) -> RunRow | None:
        row = self._read(
            lambda c: c.execute(f"SELECT {self._RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        )
        return None if row is None else self._run_row(row)

    def steps(self, run_id: str) -> list[StepRow]:
        """The steps of ``run_id`` in ``stepIndex`` order."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT step_index, tool_name, body FROM steps WHERE run_id = ? ORDER BY step_index", (run_id,)
            ).fetchall()
        )
        return [StepRow(r[0], r[1], json.loads(r[2])) for r in rows]

    def runs(self, project: str | None = None, *, limit: int = 1000) -> list[RunRow]:
        """The newest runs first, of ``project`` (or of every project)."""
        where, args = ("WHERE project = ?", (project,)) if project is not None else ("", ())
        rows = self._read(
            lambda c: c.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs {where} ORDER BY created_at DESC LIMIT ?", (*args, limit)
            ).fetchall()
        )
        return [self._run_row(r) for r in rows]

    # --- scenarios --------------------------------------------------------------------------------

    _SCENARIO_COLUMNS: Final = (
        "id, project, run_id, state, reason, body, template, normalized, embedding, chain_revision, "
        "calc_version, changed, created_at, updated_at"
    )

    @staticmethod
    def _scenario_row(row: Sequence[Any]) -> ScenarioRow:
        return ScenarioRow(
            id=row[0],
            project=row[1],
            run_id=row[2],
            state=row[3],
            reason=_loads(row[4]),
            body=json.loads(row[5]),
            template=_loads(row[6]),
            normalized=row[7],
            embedding=row[8],
            chain_revision=row[9],
            calc_version=row[10],
            changed=row[11],
            created_at=row[12],
            updated_at=row[13],
        )

    def put_scenario(
        self,
        scenario_id: str,
        *,
        project: str,
        run_id: str | None,
        state: str,
        reason: Mapping[str, Any] | None,
        body: Mapping[str, Any],
        template: Mapping[str, Any] | None,
        normalized: str | None,
        embedding: bytes | None = None,
        calc_version: int = 0,
        bump_revision: bool = False,
        now: float | None = None,
    ) -> ScenarioRow:
        """Insert or replace a scenario; its chain revision is kept (and moved on with ``bump_revision``)."""
        stamp = time.time() if now is None else now

        def write(conn: sqlite3.Connection) -> None:
            changed = self._bump(conn, "changed")
            old = conn.execute(
                "SELECT chain_revision, created_at FROM scenarios WHERE id = ?", (scenario_id,)
            ).fetchone()
            revision = (old[0] if old else 1) + (1 if bump_revision and old else 0)
            # An upsert, not REPLACE: a replaced row would take its edits and the runs it rests on with it
            # (their foreign keys cascade on the delete REPLACE does).
            updates = ", ".join(f"{c} = excluded.{c}" for c in self._SCENARIO_COLUMNS.split(", ") if c != "id")
            conn.execute(
                f"INSERT INTO scenarios ({self._SCENARIO_COLUMNS}) "
                f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET {updates}",
                (
                    scenario_id,
                    project,
                    run_id,
                    state,
                    None if reason is None else _dumps(dict(reason)),
                    _dumps(dict(body)),
                    None if template is None else _dumps(dict(template)),
                    normalized,
                    embedding,
                    revision,
                    calc_version,
                    changed,
                    old[1] if old else stamp,
                    stamp,
                ),
            )
            if run_id is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO scenario_runs (scenario_id, run_id, role) VALUES (?, ?, 'source')",
                    (scenario_id, run_id),
                )

        self._write(write)
        found = self.scenario(scenario_id)
        assert found is not None
        return found

    def update_scenario_body(self, scenario_id: str, body: Mapping[str, Any], *, state: str | None = None) -> int:
        """Replace a scenario's serialized body (a saved edit); returns its new chain revision."""

        def write(conn: sqlite3.Connection) -> int:
            changed = self._bump(conn, "changed")
            conn.execute(
                "UPDATE scenarios SET body = ?, state = COALESCE(?, state), chain_revision = chain_revision + 1, "
                "changed = ?, updated_at = ? WHERE id = ?",
                (_dumps(dict(body)), state, changed, time.time(), scenario_id),
            )
            return int(conn.execute("SELECT chain_revision FROM scenarios WHERE id = ?", (scenario_id,)).fetchone()[0])

        return self._write(write)

    def set_embedding(self, scenario_id: str, embedding: bytes) -> None:
        def write(conn: sqlite3.Connection) -> None:
            changed = self._bump(conn, "changed")
            conn.execute(
                "UPDATE scenarios SET embedding = ?, changed = ? WHERE id = ?", (embedding, changed, scenario_id)
            )

        self._write(write)

    def scenario(self, scenario_id: str) -> ScenarioRow | None:
        row = self._read(
            lambda c: c.execute(
                f"SELECT {self._SCENARIO_COLUMNS} FROM scenarios WHERE id = ?", (scenario_id,)
            ).fetchone()
        )
        return None if row is None else self._scenario_row(row)

    def scenario_of_run(self, run_id: str) -> ScenarioRow | None:
        row = self._read(
            lambda c: c.execute(
                f"SELECT {self._SCENARIO_COLUMNS} FROM scenarios WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return None if row is None else self._scenario_row(row)

    def scenarios_changed_since(self, changed: int) -> list[ScenarioRow]:
        """Every scenario written after the counter stood at ``changed`` (the matcher's refresh)."""
        rows = self._read(
            lambda c: c.execute(
                f"SELECT {self._SCENARIO_COLUMNS} FROM scenarios WHERE changed > ? ORDER BY changed", (changed,)
            ).fetchall()
        )
        return [self._scenario_row(r) for r in rows]

    def index_rows_since(self, changed: int) -> list[tuple[str, str, str | None, str, Any, bytes | None, float]]:
        """What the matcher's index needs of every scenario written since ``changed``, without the bodies:
        ``(id, project, run_id, state, template, embedding, created_at)``."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT id, project, run_id, state, template, embedding, created_at FROM scenarios "
                "WHERE changed > ? ORDER BY changed",
                (changed,),
            ).fetchall()
        )
        return [(r[0], r[1], r[2], r[3], _loads(r[4]), r[5], r[6]) for r in rows]

    # --- edits ------------------------------------------------------------------------------------

    def add_edit(
        self,
        scenario_id: str,
        *,
        kind: str,
        step_index: int | None,
        entry: Mapping[str, Any],
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> EditRow:
        """Append an edit to a scenario's history; its id is ``sedit_<n>``, unique in the store."""

        def write(conn: sqlite3.Connection) -> EditRow:
            seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM edits").fetchone()[0])
            edit_id = f"sedit_{seq}"
            full = {**dict(entry), "id": edit_id}
            conn.execute(
                "INSERT INTO edits (id, scenario_id, seq, kind, step_index, entry, before, after) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    edit_id,
                    scenario_id,
                    seq,
                    kind,
                    step_index,
                    _dumps(full),
                    None if before is None else _dumps(dict(before)),
                    None if after is None else _dumps(dict(after)),
                ),
            )
            return EditRow(
                edit_id,
                scenario_id,
                seq,
                kind,
                step_index,
                full,
                None if before is None else dict(before),
                None if after is None else dict(after),
            )

        return self._write(write)

    def update_edit(self, edit_id: str, entry: Mapping[str, Any]) -> None:
        self._write(lambda c: c.execute("UPDATE edits SET entry = ? WHERE id = ?", (_dumps(dict(entry)), edit_id)))

    def edits(self, scenario_id: str) -> list[EditRow]:
        """A scenario's edits, oldest first."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT id, scenario_id, seq, kind, step_index, entry, before, after FROM edits "
                "WHERE scenario_id = ? ORDER BY seq",
                (scenario_id,),
            ).fetchall()
        )
        return [EditRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), _loads(r[6]), _loads(r[7])) for r in rows]

    def clear_edits(self, scenario_id: str) -> None:
        self._write(lambda c: c.execute("DELETE FROM edits WHERE scenario_id = ?", (scenario_id,)))

    # --- tickets and executions -------------------------------------------------------------------

    def issue_ticket(
        self,
        ticket: str,
        *,
        scenario_id: str,
        run_id: str | None,
        project: str,
        prompt: str,
        rule: str,
        similarity: float,
        params: Mapping[str, Any],
        now: float | None = None,
    ) -> None:
        stamp = time.time() if now is None else now
        self._write(
            lambda c: c.execute(
                "INSERT INTO tickets (ticket, scenario_id, run_id, project, prompt, rule, similarity, params, "
                "issued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ticket, scenario_id, run_id, project, prompt, rule, similarity, _dumps(dict(params)), stamp),
            )
        )

    @staticmethod
    def _ticket_row(r: Sequence[Any]) -> TicketRow:
        return TicketRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), r[8])

    def ticket(self, ticket: str) -> TicketRow | None:
        row = self._read(
            lambda c: c.execute(
                "SELECT ticket, scenario_id, run_id, project, prompt, rule, similarity, params, issued_at "
                "FROM tickets WHERE ticket = ?",
                (ticket,),
            ).fetchone()
        )
        return None if row is None else self._ticket_row(row)

    def latest_ticket(self, scenario_id: str, prompt: str) -> TicketRow | None:
        """The newest ticket issued for ``prompt`` on ``scenario_id``: the values its match found."""
        row = self._read(
            lambda c: c.execute(
                "SELECT ticket, scenario_id, run_id, project, prompt, rule, similarity, params, issued_at "
                "FROM tickets WHERE scenario_id = ? AND prompt = ? ORDER BY issued_at DESC LIMIT 1",
                (scenario_id, prompt),
            ).fetchone()
        )
        return None if row is None else self._ticket_row(row)

    def book(
        self,
        ticket: str,
        scenario_id: str,
        *,
        outcome: str,
        ledger: str,
        measured: bool,
        report: Mapping[str, Any],
        now: float | None = None,
    ) -> BookStatus:
        """Redeem ``ticket`` with its report, exactly once.

        ``ticket_unknown`` when no such ticket was issued for ``scenario_id`` or it expired;
        ``duplicate`` when it was already redeemed (the primary key refuses the second row).
        """
        stamp = time.time() if now is None else now
        text = _dumps(dict(report))

        def write(conn: sqlite3.Connection) -> BookStatus:
            row = conn.execute(
                "SELECT scenario_id, project, issued_at FROM tickets WHERE ticket = ?", (ticket,)
            ).fetchone()
            if row is None or row[0] != scenario_id or stamp - row[2] > TICKET_TTL_S:
                return "ticket_unknown"
            try:
                conn.execute(
                    "INSERT INTO executions (ticket, scenario_id, project, outcome, ledger, measured, report, "
                    "booked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (ticket, scenario_id, row[1], outcome, ledger, int(measured), text, stamp),
                )
            except sqlite3.IntegrityError:
                return "duplicate"
            return "booked"

        return self._write(write)

    def executions(self, scenario_id: str | None = None) -> list[dict[str, Any]]:
        where, args = ("WHERE scenario_id = ?", (scenario_id,)) if scenario_id is not None else ("", ())
        rows = self._read(
            lambda c: c.execute(
                f"SELECT ticket, scenario_id, project, outcome, ledger, measured, report, booked_at FROM executions "
                f"{where} ORDER BY booked_at",
                args,
            ).fetchall()
        )
        return [
            {
                "ticket": r[0],
                "scenarioId": r[1],
                "project": r[2],
                "outcome": r[3],
                "ledger": r[4],
                "measured": bool(r[5]),
                "report": json.loads(r[6]),
                "bookedAt": r[7],
            }
            for r in rows
        ]

    def ticket_counts(self) -> dict[str, int]:
        rows = self._read(
            lambda c: c.execute("SELECT scenario_id, count(*) FROM tickets GROUP BY scenario_id").fetchall()
        )
        return {r[0]: int(r[1]) for r in rows}

    # --- runs learned from transcripts, and the runs a scenario rests on (issue 19) ----------------

    def import_runs(
        self,
        runs: Sequence[ImportedRun],
        *,
        transcript: str,
        project: str,
        read_bytes: int,
        mtime: float,
        now: float | None = None,
    ) -> list[str]:
        """Add runs read from ``transcript`` and move its read offset, in one transaction: either every
        run and the offset are written, or nothing is. A run whose id is here already is left as it is (a
        transcript read twice adds nothing). Returns the ids of the runs added."""
        stamp = time.time() if now is None else now

        def write(conn: sqlite3.Connection) -> list[str]:
            added: list[str] = []
            for run in runs:
                meta = _dumps(dict(run.metadata))
                finish = _dumps(dict(run.finish))
                bodies = [_dumps(dict(step)) for step in run.steps]
                size = len(run.input) + len(meta) + len(finish) + sum(len(b) for b in bodies)
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO runs (id, project, input, framework, metadata, origin, created_at, "
                    "finished_at, finish, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.id,
                        run.project,
                        run.input,
                        run.framework,
                        meta,
                        run.origin,
                        run.created_at,
                        run.finished_at,
                        finish,
                        size,
                    ),
                )
                if cursor.rowcount != 1:
                    continue
                for step, text in zip(run.steps, bodies, strict=True):
                    conn.execute(
                        "INSERT OR REPLACE INTO steps (run_id, step_index, tool_name, body, bytes) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (run.id, int(step["stepIndex"]), str(step["toolName"]), text, len(text)),
                    )
                added.append(run.id)
            conn.execute(
                "INSERT OR REPLACE INTO transcript_imports (path, project, read_bytes, mtime, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (transcript, project, read_bytes, mtime, stamp),
            )
            return added

        return self._write(write)

    def transcript_read(self, transcript: str) -> tuple[int, float] | None:
        """How far ``transcript`` was read, and its modification time then; None when never."""
        row = self._read(
            lambda c: c.execute(
                "SELECT read_bytes, mtime FROM transcript_imports WHERE path = ?", (transcript,)
            ).fetchone()
        )
        return None if row is None else (int(row[0]), float(row[1]))

    def prompt_keys(self, project: str) -> set[tuple[str, str]]:
        """``(sessionId, promptId)`` of the project's runs that carry them (a live recording's metadata,
        an import's): a turn already here is not learned again."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT json_extract(metadata, '$.sessionId'), json_extract(metadata, '$.promptId') FROM runs "
                "WHERE project = ?",
                (project,),
            ).fetchall()
        )
        return {(str(a), str(b)) for a, b in rows if a and b}

    def uncalculated_runs(self, project: str) -> list[str]:
        """The project's finished runs no scenario rests on yet (learned, or calculated before a crash),
        oldest first; a replayed turn waiting for its report is not one of them."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT id FROM runs WHERE project = ? AND finish IS NOT NULL AND origin != 'replay' "
                "AND id NOT IN (SELECT run_id FROM scenario_runs) ORDER BY created_at",
                (project,),
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    def rests_in_a_scenario(self, run_id: str) -> bool:
        """Whether some scenario rests on ``run_id`` already."""
        row = self._read(lambda c: c.execute("SELECT 1 FROM scenario_runs WHERE run_id = ?", (run_id,)).fetchone())
        return row is not None

    @staticmethod
    def _spend(conn: sqlite3.Connection, run_id: str, *, calls: int, micro: int) -> None:
        for key, by in (("model_calls", calls), ("model_micro_usd", micro)):
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, 0)", (key,))
            conn.execute("UPDATE meta SET value = value + ? WHERE key = ?", (by, key))
        conn.execute(
            "INSERT INTO model_spend (run_id, micro_usd) VALUES (?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET micro_usd = micro_usd + excluded.micro_usd",
            (run_id, micro),
        )

    def reserve_model_call(self, run_id: str, estimate_usd: float) -> int:
        """Count one model-pass call for ``run_id`` at its estimate, before it is made (kept in ``meta``
        and ``model_spend`` as micro-dollars); ``settle_model_call`` replaces the estimate by the real
        cost. A process that dies in between leaves the estimate counted. Returns the micro-dollars held."""
        micro = max(0, round(estimate_usd * 1_000_000))
        self._write(lambda conn: self._spend(conn, run_id, calls=1, micro=micro))
        return micro

    def settle_model_call(self, run_id: str, held_micro: int, cost_usd: float) -> None:
        """The real cost of a call ``reserve_model_call`` counted at ``held_micro``: the difference is
        added (or taken back), so the call is counted once, at what it cost."""
        delta = max(0, round(cost_usd * 1_000_000)) - held_micro
        self._write(lambda conn: self._spend(conn, run_id, calls=0, micro=delta))

    def model_spent(self, run_id: str) -> float:
        """What the model pass spent for ``run_id`` so far, in dollars (calls in flight at their estimate)."""
        row = self._read(
            lambda c: c.execute("SELECT micro_usd FROM model_spend WHERE run_id = ?", (run_id,)).fetchone()
        )
        return 0.0 if row is None else int(row[0]) / 1_000_000

    def model_calls(self) -> tuple[int, float]:
        """How many model-pass calls were made, and their cost in dollars."""
        rows = dict(
            self._read(
                lambda c: c.execute(
                    "SELECT key, value FROM meta WHERE key IN ('model_calls', 'model_micro_usd')"
                ).fetchall()
            )
        )
        return int(rows.get("model_calls", 0)), int(rows.get("model_micro_usd", 0)) / 1_000_000

    def set_reason(self, scenario_id: str, reason: Mapping[str, Any]) -> None:
        """Replace a not-ready scenario's reason (what a model pass added to it)."""
        self._write(
            lambda c: c.execute("UPDATE scenarios SET reason = ? WHERE id = ?", (_dumps(dict(reason)), scenario_id))
        )

    def runs_of(self, scenario_id: str) -> list[tuple[str, str]]:
        """``(run id, role)`` of every run ``scenario_id`` rests on, oldest first."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT sr.run_id, sr.role FROM scenario_runs sr JOIN runs r ON r.id = sr.run_id "
                "WHERE sr.scenario_id = ? ORDER BY r.created_at",
                (scenario_id,),
            ).fetchall()
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def set_runs(self, scenario_id: str, runs: Mapping[str, str]) -> None:
        """Make ``runs`` (run id -> role) the runs ``scenario_id`` rests on."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM scenario_runs WHERE scenario_id = ?", (scenario_id,))
            for run_id, role in runs.items():
                conn.execute(
                    "INSERT OR REPLACE INTO scenario_runs (scenario_id, run_id, role) VALUES (?, ?, ?)",
                    (scenario_id, run_id, role),
                )

        self._write(write)

    def scenario_heads(self, project: str, *, limit: int = 2_000) -> list[tuple[str, str | None, str, Any]]:
        """``(id, run_id, state, template)`` of the project's newest scenarios, whatever their state (a run
        looking for the task it repeats reads these)."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT id, run_id, state, template FROM scenarios WHERE project = ? ORDER BY created_at DESC LIMIT ?",
                (project, limit),
            ).fetchall()
        )
        return [(r[0], r[1], r[2], _loads(r[3])) for r in rows]

    def delete_run(self, run_id: str) -> bool:
        """Remove a run that is not a recording after all (a replayed turn that repaired nothing)."""

        def write(conn: sqlite3.Connection) -> bool:
            gone = conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 1
            if gone:
                self._bump(conn, "generation")
            return gone

        return self._write(write)

    def run_of_ticket(self, ticket: str) -> str | None:
        """The replayed turn recorded under ``ticket`` (a repair candidate), if any."""
        row = self._read(
            lambda c: c.execute(
                "SELECT id FROM runs WHERE origin = 'replay' AND json_extract(metadata, '$.ticket') = ?", (ticket,)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    def execution(self, ticket: str) -> dict[str, Any] | None:
        """The booked execution of ``ticket``: its outcome and report; None when not booked."""
        row = self._read(
            lambda c: c.execute("SELECT outcome, report FROM executions WHERE ticket = ?", (ticket,)).fetchone()
        )
        return None if row is None else {"outcome": row[0], "report": json.loads(row[1])}

    # --- size, pruning, forgetting ----------------------------------------------------------------

    def size_bytes(self) -> int:
        """The bytes of recorded data the store holds (what its limit counts), not the file's size."""

        def read(conn: sqlite3.Connection) -> int:
            runs = conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0]
            scenarios = conn.execute("SELECT COALESCE(SUM(length(body)), 0) FROM scenarios").fetchone()[0]
            return int(runs) + int(scenarios)

        return self._read(read)

    def counts(self) -> dict[str, int]:
        def read(conn: sqlite3.Connection) -> dict[str, int]:
            out: dict[str, int] = {}
            for table in ("runs", "steps", "scenarios", "tickets", "executions", "edits"):
                out[table] = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            out["ready"] = int(conn.execute("SELECT count(*) FROM scenarios WHERE state = 'ready'").fetchone()[0])
            return out

        return self._read(read)

    def prune(self, max_bytes: int, *, now: float | None = None) -> list[str]:
        """Remove the oldest runs until the store is under ``PRUNE_TO`` of ``max_bytes``; returns their ids.

        Runs that no ready scenario rests on go first; a run a ready scenario rests on goes (with its
        scenario) only when the rest is not enough. A run still being recorded (no finish yet, younger than
        ``OPEN_RUN_KEPT_S``) never goes: its steps and finish are on their way.
        """
        if self.size_bytes() <= max_bytes:
            return []
        target = int(max_bytes * PRUNE_TO)
        open_since = (time.time() if now is None else now) - OPEN_RUN_KEPT_S

        def write(conn: sqlite3.Connection) -> list[str]:
            size = int(conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0]) + int(
                conn.execute("SELECT COALESCE(SUM(length(body)), 0) FROM scenarios").fetchone()[0]
            )
            doomed: list[str] = []
            order = conn.execute(
                "SELECT r.id, r.bytes + COALESCE(length(s.body), 0), "
                "CASE WHEN s.state = 'ready' THEN 1 ELSE 0 END AS keep "
                "FROM runs r LEFT JOIN scenarios s ON s.run_id = r.id "
                "WHERE r.finish IS NOT NULL OR r.created_at < ? ORDER BY keep, r.created_at",
                (open_since,),
            ).fetchall()
            for run_id, weight, _keep in order:
                if size <= target:
                    break
                doomed.append(run_id)
                size -= int(weight)
            for run_id in doomed:
                conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            if doomed:
                self._bump(conn, "generation")
            return doomed

        return self._write(write)

    def forget(self, ident: str) -> list[str]:
        """Forget a scenario (``scn_…``) or a run (``run_…``): the scenario, its runs, edits and tickets.

        The executions booked against it stay, so the savings already made are still counted. Returns
        what was removed (ids); empty when nothing matched.
        """

        def write(conn: sqlite3.Connection) -> list[str]:
            scenario_ids: set[str] = set()
            run_ids: set[str] = set()
            if conn.execute("SELECT 1 FROM scenarios WHERE id = ?", (ident,)).fetchone():
                scenario_ids.add(ident)
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (ident,)).fetchone():
                run_ids.add(ident)
            for (sid,) in conn.execute("SELECT scenario_id FROM scenario_runs WHERE run_id = ?", (ident,)).fetchall():
                scenario_ids.add(sid)
            for sid in scenario_ids:
                for (rid,) in conn.execute("SELECT run_id FROM scenario_runs WHERE scenario_id = ?", (sid,)).fetchall():
                    run_ids.add(rid)
                row = conn.execute("SELECT run_id FROM scenarios WHERE id = ?", (sid,)).fetchone()
                if row and row[0]:
                    run_ids.add(row[0])
            for sid in scenario_ids:
                conn.execute(
                    "DELETE FROM tickets WHERE scenario_id = ? AND ticket NOT IN (SELECT ticket FROM executions)",
                    (sid,),
                )
                conn.execute("DELETE FROM scenarios WHERE id = ?", (sid,))
            for rid in run_ids:
                conn.execute("DELETE FROM runs WHERE id = ?", (rid,))
            if scenario_ids or run_ids:
                self._bump(conn, "generation")
            return sorted(scenario_ids | run_ids)

        return self._write(write)

    # --- export and import ------------------------------------------------------------------------

    _TABLES: Final = ("runs", "steps", "scenarios", "scenario_runs", "edits", "tickets", "executions")

    def export(self) -> dict[str, Any]:
        """The whole store as one JSON-ready document (``import_document`` reads it back), read in one
        transaction, so a control server writing meanwhile never leaves a step without its run in it."""

        def read(conn: sqlite3.Connection) -> dict[str, Any]:
            doc: dict[str, Any] = {
                "format": EXPORT_FORMAT,
                "version": schema.CURRENT_VERSION,
                "exportedAt": time.time(),
            }
            conn.execute("BEGIN")
            try:
                for table in self._TABLES:
                    cursor = conn.execute(f"SELECT * FROM {table}")
                    names = [d[0] for d in cursor.description]
                    rows = []
                    for row in cursor.fetchall():
                        item = dict(zip(names, row, strict=True))
                        if table == "scenarios":
                            item.pop("embedding", None)
                        rows.append(item)
                    doc[table] = rows
            finally:
                conn.execute("COMMIT")
            return doc

        return self._read(read)

    def import_document(self, doc: Mapping[str, Any]) -> dict[str, int]:
        """Add what an exported document holds; rows already here (same key) are kept as they are.

        Raises:
            StoreError: the document is not a bir store export, or is from a newer store version.
        """
        if doc.get("format") != EXPORT_FORMAT:
            raise StoreError("not a bir local store export (its format field is missing or different)")
        version = doc.get("version")
        if not isinstance(version, int) or version > schema.CURRENT_VERSION:
            raise StoreError(
                f"the export is of store version {version!r}; this bir reads up to {schema.CURRENT_VERSION}"
            )

        def write(conn: sqlite3.Connection) -> dict[str, int]:
            added: dict[str, int] = {}
            for table in self._TABLES:
                rows = doc.get(table) or []
                if not isinstance(rows, list):
                    raise StoreError(f"the export's {table} is not a list")
                columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]
                count = 0
                for row in rows:
                    if not isinstance(row, dict):
                        raise StoreError(f"a row of the export's {table} is not an object")
                    values = {k: v for k, v in row.items() if k in columns}
                    if table == "scenarios":
                        values["changed"] = self._bump(conn, "changed")
                    names = ", ".join(values)
                    marks = ", ".join("?" for _ in values)
                    cursor = conn.execute(
                        f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})", tuple(values.values())
                    )
                    count += cursor.rowcount
                added[table] = count
            return added

        return self._write(write)

    # --- for tests and tools ----------------------------------------------------------------------

    @contextlib.contextmanager
    def raw(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the store's lock (for inspection only)."""
        with self._lock:
            yield self._conn
