"""The local store on disk: migrations, files that are not ours, several writer processes, SIGKILL mid-write,
pruning, and a full disk."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bir.cli import main
from bir.core import config
from bir.hooks.local import schema
from bir.hooks.local.store import Store, StoreError, StoreFull
from tests.paths import REPO

WRITER = [sys.executable, "-m", "tests.hooks.local.store_writer"]


def _tickets(store: Store, n: int = 50) -> None:
    for i in range(n):
        store.issue_ticket(
            f"tkt_{i}",
            scenario_id="scn_shared",
            run_id=None,
            project="/p",
            prompt="p",
            rule="slot",
            similarity=1.0,
            params={},
        )


def test_a_new_store_is_created_at_the_current_version_with_its_application_id(tmp_path: Path) -> None:
    store = Store(tmp_path / "local" / "store.db")
    with store.raw() as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.CURRENT_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    assert (tmp_path / "local" / "store.db").stat().st_mode & 0o777 == 0o600


def test_an_older_store_is_migrated_once_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    extra = ("CREATE TABLE later (x INTEGER)", "INSERT INTO later VALUES (1)")
    later = schema.CURRENT_VERSION + 1
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, (later, extra)))
    monkeypatch.setattr(schema, "CURRENT_VERSION", later)
    store = Store(path)
    again = Store(path)
    with store.raw() as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == later
        assert conn.execute("SELECT count(*) FROM later").fetchone()[0] == 1
    store.close()
    again.close()


def test_a_store_from_a_newer_bir_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer bir"):
        Store(path)


def test_a_file_that_is_not_a_database_is_refused_and_kept_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"my notes, not a database\n" * 10)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a bir store"):
        Store(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "store.db-wal").exists()


def test_another_programs_sqlite_database_is_refused_and_never_written(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE contacts (name TEXT)")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="another program's SQLite database"):
        Store(path)
    assert path.read_bytes() == before
    plain = tmp_path / "plain.db"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
    with pytest.raises(StoreError, match="another program's"):
        Store(plain)


def test_a_corrupt_store_is_refused_with_a_clear_message_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = Store(path)
    for i in range(200):
        store.create_run(f"run_{i}", project="/p", input="x" * 2000)
    store.close()
    data = bytearray(path.read_bytes())
    # Past the header: scribble over the pages, not the file's identity.
    data[8192 : 8192 + 20000] = b"\xff" * 20000
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"corrupt|cannot be read"):
        Store(path)
    assert path.read_bytes() == before


def test_a_planted_symlink_for_the_store_is_refused_and_its_target_never_written(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    target.touch()
    home = tmp_path / "home"
    (home / "local").mkdir(parents=True, mode=0o700)
    (home / "local" / "store.db").symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link") as refused:
        Store(home / "local" / "store.db")
    assert "\n" not in str(refused.value)
    assert target.stat().st_size == 0
    assert sorted(p.name for p in target.parent.iterdir()) == ["victim"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_planted_symlink_beside_the_store_is_refused_and_its_target_never_written(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    target = tmp_path / "victim"
    target.touch()
    (tmp_path / f"store.db{suffix}").symlink_to(target)
    with pytest.raises(StoreError, match="symbolic link"):
        Store(path)
    assert target.stat().st_size == 0


def test_a_fifo_for_the_store_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    os.mkfifo(path)
    with pytest.raises(StoreError, match="not a regular file"):
        Store(path)


def test_a_store_folder_others_may_write_to_is_refused_with_its_fix(tmp_path: Path) -> None:
    folder = tmp_path / "local"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(StoreError, match="chmod 700"):
        Store(folder / "store.db")
    assert not (folder / "store.db").exists()


def test_a_new_store_folder_is_made_private(tmp_path: Path) -> None:
    Store(tmp_path / "home" / "local" / "store.db").close()
    assert (tmp_path / "home" / "local").stat().st_mode & 0o777 == 0o700


def test_bir_stats_on_a_planted_store_symlink_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "victim"
    target.touch()
    home = config.home()
    (home / "local").mkdir(mode=0o700)
    (home / "local" / "store.db").symlink_to(target)
    assert main(["stats"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "symbolic link" in err
    assert target.stat().st_size == 0


def test_a_ticket_is_redeemed_once_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    _tickets(store, 1)
    assert (
        store.book("tkt_0", "scn_shared", outcome="steered_full", ledger="savings", measured=True, report={})
        == "booked"
    )
    assert (
        store.book("tkt_0", "scn_shared", outcome="failed", ledger="baseline", measured=True, report={}) == "duplicate"
    )
    assert store.book("tkt_x", "scn_shared", outcome="failed", ledger="baseline", measured=True, report={}) == (
        "ticket_unknown"
    )
    assert store.book("tkt_0", "scn_other", outcome="failed", ledger="baseline", measured=True, report={}) == (
        "ticket_unknown"
    )
    store.close()


def _writers(path: Path, count: int, names: list[str]) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return [
        subprocess.Popen([*WRITER, str(path), name, str(count)], stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
        for name in names
    ]


def test_writer_processes_at_once_lose_no_run_and_book_no_ticket_twice(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = Store(path)
    _tickets(store)
    procs = _writers(path, 40, ["a", "b", "c"])
    said = [p.communicate(timeout=120)[0].splitlines() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    acked_runs = {line.split()[1] for lines in said for line in lines if line.startswith("run ")}
    booked = [line.split()[1] for lines in said for line in lines if line.startswith("booked ")]
    assert len(acked_runs) == 120
    assert {r.id for r in store.runs(limit=1000)} == acked_runs
    assert all(len(store.steps(r)) == 2 for r in acked_runs)
    assert sorted(booked) == sorted(set(booked))
    assert len(store.executions("scn_shared")) == len(booked) == 40
    store.close()


def test_a_writer_killed_mid_write_loses_no_acknowledged_run_and_leaves_a_sound_store(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = Store(path)
    _tickets(store)
    victim, survivor = _writers(path, 400, ["victim", "survivor"])
    assert victim.stdout is not None
    acked: list[str] = []
    deadline = time.monotonic() + 60
    while len(acked) < 30 and time.monotonic() < deadline:
        acked.append(victim.stdout.readline().strip())
    victim.send_signal(signal.SIGKILL)
    rest, _ = victim.communicate(timeout=30)
    acked += rest.splitlines()
    survivor_lines = survivor.communicate(timeout=180)[0].splitlines()
    assert victim.returncode == -signal.SIGKILL
    assert survivor.returncode == 0
    runs = {r.id for r in store.runs(limit=10_000)}
    for line in [*acked, *survivor_lines]:
        if line.startswith("run "):
            assert line.split()[1] in runs
    booked = [line.split()[1] for line in [*acked, *survivor_lines] if line.startswith("booked ")]
    assert len(booked) == len(set(booked))
    assert len(store.executions("scn_shared")) >= len(booked)
    store.close()
    reopened = Store(path)
    with reopened.raw() as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    reopened.close()


def test_past_its_limit_the_store_prunes_its_oldest_runs_and_keeps_what_a_ready_scenario_rests_on(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store.db")
    for i in range(20):
        store.create_run(f"run_{i}", project="/p", input="x" * 10_000, now=float(i))
    store.put_scenario(
        "scn_0", project="/p", run_id="run_0", state="ready", reason=None, body={}, template=None, normalized=None
    )
    removed = store.prune(100_000)
    assert removed
    assert "run_0" not in removed
    assert store.size_bytes() <= 90_000
    left = {r.id for r in store.runs(limit=100)}
    assert "run_0" in left
    assert "run_19" in left
    assert min(int(r.removeprefix("run_")) for r in removed) == 1
    store.close()


def test_pruning_leaves_a_run_still_being_recorded_and_takes_one_left_open_for_a_day(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    now = 1_000_000.0
    for i in range(10):
        store.create_run(f"run_{i}", project="/p", input="x" * 10_000, now=now - 100 + i)
        store.finish_run(f"run_{i}", {"output": "done"}, now=now - 100 + i)
        store.put_scenario(
            f"scn_{i}",
            project="/p",
            run_id=f"run_{i}",
            state="ready",
            reason=None,
            body={},
            template=None,
            normalized=None,
        )
    # No ready scenario rests on these yet: the one being recorded now, and one its turn left open long ago.
    store.create_run("run_recording", project="/p", input="x" * 10_000, now=now)
    store.create_run("run_abandoned", project="/p", input="x" * 10_000, now=now - 2 * 24 * 3600)
    removed = store.prune(60_000, now=now)
    assert "run_recording" not in removed
    assert removed[0] == "run_abandoned"
    assert store.run("run_recording") is not None
    assert store.add_step("run_recording", 0, "Read", {"stepIndex": 0, "toolName": "Read"}) == "open"
    store.close()


def test_a_full_disk_refuses_the_write_as_store_full_and_keeps_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    store = Store(path, max_page_count=pages + 2)
    store.create_run("run_kept", project="/p", input="small")

    def fill() -> None:
        for i in range(100):
            store.create_run(f"run_{i}", project="/p", input="x" * 50_000)

    with pytest.raises(StoreFull):
        fill()
    assert store.run("run_kept") is not None
    store.close()


LOCKED_PROBE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0.3, isolation_level=None)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print("locked" if "locked" in str(exc) else f"error: {exc}")
else:
    print("got the write lock")
"""


def test_a_second_store_opened_in_the_same_process_never_drops_the_first_ones_locks(tmp_path: Path) -> None:
    # Closing any descriptor of a file drops every POSIX lock the process holds on it: a second Store that
    # opened and closed the file to check it would free the first one's write lock for another process.
    path = tmp_path / "local" / "store.db"
    first = Store(path)
    first._conn.execute("BEGIN IMMEDIATE")
    try:
        second = Store(path)
        probe = subprocess.run(
            [sys.executable, "-c", LOCKED_PROBE, str(path)], capture_output=True, text=True, timeout=60, check=True
        )
        assert probe.stdout.strip() == "locked"
        second.close()
        again = subprocess.run(
            [sys.executable, "-c", LOCKED_PROBE, str(path)], capture_output=True, text=True, timeout=60, check=True
        )
        assert again.stdout.strip() == "locked"
    finally:
        first._conn.execute("ROLLBACK")
        first.close()
    free = subprocess.run(
        [sys.executable, "-c", LOCKED_PROBE, str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    assert free.stdout.strip() == "got the write lock"
