from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from bir.hooks.discovery import (
    Discovery,
    control_dir,
    discovery_key,
    discovery_path,
    read_discovery,
    remove_discovery,
    write_discovery,
)


def _discovery(project: Path, pid: int | None = None) -> Discovery:
    return Discovery(
        url="http://127.0.0.1:4567",
        token="secret-token",
        pid=os.getpid() if pid is None else pid,
        version="0.1.0",
        started_at=1_700_000_000_000,
        project=str(project),
    )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_written_discovery_file_reads_back_for_the_same_project(tmp_path: Path) -> None:
    written = _discovery(tmp_path)
    write_discovery(written)
    assert read_discovery(tmp_path) == written


def test_the_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = write_discovery(_discovery(tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(control_dir().stat().st_mode) == 0o700


def test_an_existing_loose_control_directory_is_tightened(tmp_path: Path) -> None:
    control_dir().mkdir(parents=True, mode=0o755)
    os.chmod(control_dir(), 0o755)
    write_discovery(_discovery(tmp_path))
    assert stat.S_IMODE(control_dir().stat().st_mode) == 0o700


def test_the_key_is_the_same_for_every_spelling_of_a_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    link = tmp_path / "link"
    link.symlink_to(project)
    assert discovery_key(project) == discovery_key(f"{project}/.") == discovery_key(link)
    assert len(discovery_key(project)) == 16
    assert discovery_key(project) != discovery_key(tmp_path)
    assert discovery_path(project).parent == control_dir()


def test_rewriting_replaces_the_file_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    write_discovery(_discovery(tmp_path))
    second = Discovery(
        url="http://127.0.0.1:9999", token="t2", pid=os.getpid(), version="0.2", started_at=1, project=str(tmp_path)
    )
    write_discovery(second)
    assert read_discovery(tmp_path) == second
    assert [p.name for p in control_dir().iterdir()] == [discovery_path(tmp_path).name]


def test_a_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_discovery(tmp_path) is None


def test_a_corrupt_or_oversized_file_reads_as_none(tmp_path: Path) -> None:
    write_discovery(_discovery(tmp_path))
    path = discovery_path(tmp_path)
    for content in (b"{not json", b'{"url": 5}', b"[]", b" " * (128 * 1024)):
        path.write_bytes(content)
        assert read_discovery(tmp_path) is None


def test_a_file_left_by_a_dead_process_reads_as_none(tmp_path: Path) -> None:
    write_discovery(_discovery(tmp_path, pid=_dead_pid()))
    assert read_discovery(tmp_path) is None


def test_remove_deletes_only_the_file_of_the_given_pid(tmp_path: Path) -> None:
    write_discovery(_discovery(tmp_path))
    assert remove_discovery(tmp_path, pid=os.getpid() + 1) is False
    assert discovery_path(tmp_path).exists()
    assert remove_discovery(tmp_path, pid=os.getpid()) is True
    assert not discovery_path(tmp_path).exists()
    assert remove_discovery(tmp_path) is False
