"""A home bir can trust: its folders 0700 and its own, its files regular, its own, never followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bir.core.home_files import HomeError, open_private, private_dir, read_private, write_private

OTHER_UID = 12345


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("loose_umask")
def test_the_home_and_every_folder_in_it_are_created_0700(tmp_path: Path) -> None:
    home = tmp_path / "not-yet" / "home"
    made = private_dir(home, "control", "deep")
    assert made == home / "control" / "deep"
    assert [mode(p) for p in (home, home / "control", made)] == [0o700, 0o700, 0o700]


def test_a_folder_others_may_only_read_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir(mode=0o755)
    os.chmod(tmp_path / "logs", 0o755)
    private_dir(tmp_path, "logs")
    assert mode(tmp_path / "logs") == 0o700


def test_a_folder_group_or_others_may_write_to_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "control").mkdir()
    os.chmod(tmp_path / "control", 0o777)
    with pytest.raises(HomeError) as refused:
        private_dir(tmp_path, "control")
    message = str(refused.value)
    assert "writable by group or others (mode 0777)" in message
    assert f"chmod 700 {tmp_path / 'control'}" in message
    assert "\n" not in message


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_or_file_of_another_user_is_refused(tmp_path: Path) -> None:
    (tmp_path / "control").mkdir(mode=0o700)
    os.chown(tmp_path / "control", OTHER_UID, OTHER_UID)
    with pytest.raises(HomeError, match="owned by another user"):
        private_dir(tmp_path, "control")
    theirs = tmp_path / "theirs.json"
    theirs.write_text("{}")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(HomeError, match=r"owned by another user \(uid 12345\)"):
        read_private(theirs, 100)


def test_a_planted_symlink_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("the user's own\n")
    link = tmp_path / "x.revive"
    link.symlink_to(target)
    for how in ("read", "append", "write", "update"):
        with pytest.raises(HomeError, match="symbolic link"):
            open_private(link, how)
    assert target.read_text() == "the user's own\n"


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "discovery.json"
    os.mkfifo(fifo)
    with pytest.raises(HomeError, match="not a regular file"):
        read_private(fifo, 100)
    for how in ("append", "write", "update"):
        with pytest.raises(HomeError, match="not a regular file"):
            open_private(fifo, how)


def test_a_hard_link_is_never_truncated_or_written(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("the user's own\n")
    os.link(target, tmp_path / "x.stalled")
    with pytest.raises(HomeError, match="hard links"):
        write_private(tmp_path / "x.stalled", b"1\n")
    assert target.read_text() == "the user's own\n"
    assert read_private(tmp_path / "x.stalled", 100) == b"the user's own\n"


def test_a_regular_file_is_written_0600_and_read_back_within_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "stamp"
    write_private(path, b"12345\n")
    assert mode(path) == 0o600
    assert read_private(path, 100) == b"12345\n"
    assert read_private(path, 3) == b"1234"
    write_private(path, b"9")
    assert read_private(path, 100) == b"9"
    with pytest.raises(FileExistsError):
        open_private(path, "new")
    with pytest.raises(FileNotFoundError):
        read_private(tmp_path / "absent", 10)


def test_a_file_of_ours_others_may_read_is_made_ours_alone_when_written(tmp_path: Path) -> None:
    log = tmp_path / "control.log"
    log.write_text("old\n")
    os.chmod(log, 0o644)
    os.close(open_private(log, "append"))
    assert mode(log) == 0o600
