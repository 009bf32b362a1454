from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bir.core import config, installed
from bir.core.log import set_stream


@pytest.fixture
def home() -> Path:
    """BIR_HOME, which tests/conftest.py points at a temp folder."""
    return config.home()


@pytest.fixture
def logs() -> Iterator[list[str]]:
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    set_stream(Sink())
    yield lines
    set_stream(None)


def test_an_absent_store_has_no_project_installed(tmp_path: Path) -> None:
    assert installed.load().projects == {}
    assert installed.project(tmp_path) is None
    assert not installed.is_installed(tmp_path)


def test_update_adds_a_project_by_its_resolved_path_in_a_0600_file(tmp_path: Path, home: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (tmp_path / "link").symlink_to(project)

    switches = installed.update(tmp_path / "link", replay=True)

    assert switches.replay is True
    assert switches.down is False
    assert installed.is_installed(project)
    path = home / "installed.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    raw = json.loads(path.read_text())
    assert raw["version"] == 1
    assert raw["projects"][str(project)] == {
        "installedAt": switches.installed_at,
        "replay": True,
        "allow": None,
        "down": False,
        "editing": False,
        "install": {},
    }


def test_update_keeps_the_switches_it_is_not_given(tmp_path: Path) -> None:
    first = installed.update(tmp_path, replay=True, allow=["fleet"])
    second = installed.update(tmp_path, down=True)
    assert second.replay is True
    assert second.allow == ("fleet",)
    assert second.down is True
    assert second.installed_at == first.installed_at


def test_remove_takes_only_that_project_out(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    installed.update(a)
    installed.update(b)
    assert installed.remove(a) is True
    assert installed.remove(a) is False
    assert not installed.is_installed(a)
    assert installed.is_installed(b)


def test_a_corrupt_store_reads_as_none_installed_and_is_moved_aside_before_a_write(
    tmp_path: Path, home: Path, logs: list[str]
) -> None:
    path = home / "installed.json"
    path.write_text('{"version": 1, "projects": {"/x": {"replay": "yes"}}}')

    assert installed.load().projects == {}
    assert any('"installed.corrupt"' in line for line in logs)

    installed.update(tmp_path, replay=False)
    aside = list(home.glob("installed.json.corrupt-*"))
    assert len(aside) == 1
    assert aside[0].read_text() == '{"version": 1, "projects": {"/x": {"replay": "yes"}}}'
    assert installed.is_installed(tmp_path)


def test_a_store_that_is_not_json_is_kept_aside_too(tmp_path: Path, home: Path, logs: list[str]) -> None:
    (home / "installed.json").write_bytes(b"\x00not json")
    assert not installed.is_installed(tmp_path)
    installed.update(tmp_path)
    assert [p.read_bytes() for p in home.glob("installed.json.corrupt-*")] == [b"\x00not json"]


def test_concurrent_updates_lose_nothing(tmp_path: Path) -> None:
    projects = [tmp_path / f"p{i}" for i in range(8)]
    for p in projects:
        p.mkdir()
    threads = [threading.Thread(target=installed.update, args=(p,), kwargs={"replay": True}) for p in projects]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(installed.load().projects) == sorted(str(p) for p in projects)


def test_a_store_that_cannot_be_written_raises_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BIR_HOME", str(blocker / "home"))
    with pytest.raises(installed.StoreError):
        installed.update(tmp_path)
