"""The local store's schema: its identity (``application_id``), its version (``user_version``) and the
ordered migrations that bring any older store to the current one.

A migration is a list of statements run in one ``BEGIN IMMEDIATE`` transaction together with the new
``user_version``, so a store is always at one version or the next, never between them, and two
processes opening an old store at once migrate it once (the second finds the version already moved).

The tables hold what issue 19 builds on as well: a run knows where it came from (``origin``: a live
session, or an imported transcript), a scenario may rest on several runs (``scenario_runs``), an edit
may be a calculation's (``kind``), and ``transcript_imports`` remembers how far each transcript was read;
``model_spend`` (version 2) what the model pass spent per run, which its cost cap is counted against.
"""

from __future__ import annotations

from typing import Final

# "BIR1" in ASCII: a SQLite file with any other application_id is some other program's database.
APPLICATION_ID: Final = 0x42495231

_V1: Final = (
    """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )
    """,
    "INSERT INTO meta (key, value) VALUES ('changed', 0), ('generation', 0)",
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        input TEXT NOT NULL,
        framework TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        origin TEXT NOT NULL DEFAULT 'live',
        created_at REAL NOT NULL,
        finished_at REAL,
        finish TEXT,
        bytes INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX runs_by_project ON runs (project, created_at)",
    "CREATE INDEX runs_by_age ON runs (created_at)",
    """
    CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        step_index INTEGER NOT NULL,
        tool_name TEXT NOT NULL,
        body TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (run_id, step_index)
    )
    """,
    """
    CREATE TABLE scenarios (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        run_id TEXT UNIQUE REFERENCES runs (id) ON DELETE CASCADE,
        state TEXT NOT NULL,
        reason TEXT,
        body TEXT NOT NULL,
        template TEXT,
        normalized TEXT,
        embedding BLOB,
        chain_revision INTEGER NOT NULL DEFAULT 1,
        calc_version INTEGER NOT NULL DEFAULT 0,
        changed INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )
    """,
    "CREATE INDEX scenarios_by_change ON scenarios (changed)",
    "CREATE INDEX scenarios_by_project ON scenarios (project, state)",
    """
    CREATE TABLE scenario_runs (
        scenario_id TEXT NOT NULL REFERENCES scenarios (id) ON DELETE CASCADE,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        PRIMARY KEY (scenario_id, run_id)
    )
    """,
    """
    CREATE TABLE edits (
        id TEXT PRIMARY KEY,
        scenario_id TEXT NOT NULL REFERENCES scenarios (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        step_index INTEGER,
        entry TEXT NOT NULL,
        before TEXT,
        after TEXT
    )
    """,
    "CREATE INDEX edits_by_scenario ON edits (scenario_id, seq)",
    """
    CREATE TABLE tickets (
        ticket TEXT PRIMARY KEY,
        scenario_id TEXT NOT NULL,
        run_id TEXT,
        project TEXT NOT NULL,
        prompt TEXT NOT NULL,
        rule TEXT NOT NULL,
        similarity REAL NOT NULL,
        params TEXT NOT NULL DEFAULT '{}',
        issued_at REAL NOT NULL
    )
    """,
    "CREATE INDEX tickets_by_scenario ON tickets (scenario_id, issued_at)",
    # The primary key is the ticket: a second booking of one ticket is refused by the database itself.
    """
    CREATE TABLE executions (
        ticket TEXT PRIMARY KEY,
        scenario_id TEXT NOT NULL,
        project TEXT NOT NULL,
        outcome TEXT NOT NULL,
        ledger TEXT NOT NULL,
        measured INTEGER NOT NULL,
        report TEXT NOT NULL,
        booked_at REAL NOT NULL
    )
    """,
    "CREATE INDEX executions_by_scenario ON executions (scenario_id)",
    """
    CREATE TABLE transcript_imports (
        path TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        read_bytes INTEGER NOT NULL,
        mtime REAL NOT NULL,
        updated_at REAL NOT NULL
    )
    """,
)

# What the model pass spent for each run, in micro-dollars: a call's estimate while it is in flight, its
# answer's real cost once settled (a process that dies mid-call leaves the estimate, an upper bound). Not a
# reference to runs: a match-time call is made before its run is created; a deleted run takes its row along.
_V2: Final = (
    """
    CREATE TABLE model_spend (
        run_id TEXT PRIMARY KEY,
        micro_usd INTEGER NOT NULL
    )
    """,
    """
    CREATE TRIGGER model_spend_of_a_deleted_run AFTER DELETE ON runs
    BEGIN
        DELETE FROM model_spend WHERE run_id = old.id;
    END
    """,
)

# (version, statements), oldest first; the store's user_version is the last version applied.
MIGRATIONS: Final[tuple[tuple[int, tuple[str, ...]], ...]] = ((1, _V1), (2, _V2))
CURRENT_VERSION: Final = MIGRATIONS[-1][0]


def pending(version: int) -> list[tuple[int, tuple[str, ...]]]:
    """The migrations a store at ``version`` still needs, in order."""
    return [(v, statements) for v, statements in MIGRATIONS if v > version]
