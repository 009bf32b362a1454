import json
import threading
import time
from pathlib import Path

from bir.core.log import log_event, log_to_file, set_stream
from bir.hooks.commands.logs import follow, human, last_lines, project_log, run_logs


def write_lines(path: Path, *lines: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def test_the_last_lines_include_the_rotated_file_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    write_lines(path.with_name("p.log.1"), "a", "b")
    write_lines(path, "c")
    assert last_lines(path, 2) == ["b", "c"]
    assert last_lines(path, 10) == ["a", "b", "c"]


def test_a_json_line_reads_as_time_event_and_fields_and_other_text_as_it_is() -> None:
    line = json.dumps({"ts": 0, "event": "plan.armed", "mode": "direct", "steps": 2, "why": None})
    shown = human(line)
    assert shown.endswith("plan.armed  mode=direct steps=2")
    assert human("not json") == "not json"
    assert len(human(json.dumps({"event": "x", "big": "y" * 5000}))) <= 400


def test_following_prints_new_lines_across_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / "p.log"
    write_lines(path, "old")
    seen: list[str] = []
    following = threading.Event()
    done = threading.Event()

    def stop() -> bool:
        # Asked first after the follower has opened the file: what is written from then on is new.
        following.set()
        return done.is_set()

    def writer() -> None:
        assert following.wait(10)
        write_lines(path, "one")
        deadline = time.monotonic() + 10
        while "one" not in seen and time.monotonic() < deadline:
            done.wait(0.01)
        path.replace(path.with_name("p.log.1"))
        write_lines(path, "two")

    thread = threading.Thread(target=writer)
    thread.start()
    for line in follow(path, stop=stop, poll_s=0.01):
        seen.append(line)
        if line == "two":
            done.set()
    thread.join()
    assert seen == ["one", "two"]


def test_bir_logs_shows_what_the_servers_log_file_holds(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    log_to_file(project_log(project))
    try:
        log_event("control.started", url="http://127.0.0.1:1")
    finally:
        set_stream(None)
    out: list[str] = []
    assert run_logs(project, lines=5, follow_on=False, as_json=False, write=out.append) == 0
    assert len(out) == 1
    assert "control.started  url=http://127.0.0.1:1" in out[0]
    raw: list[str] = []
    run_logs(project, lines=5, follow_on=False, as_json=True, write=raw.append)
    assert json.loads(raw[0])["event"] == "control.started"


def test_bir_logs_with_no_log_yet_says_where_it_looked(tmp_path: Path) -> None:
    out: list[str] = []
    assert run_logs(tmp_path, lines=5, follow_on=False, as_json=False, write=out.append) == 0
    assert out[0].startswith("No log yet for")
    assert "bir up" in out[0]


def test_bir_logs_prints_no_control_character_of_what_was_logged(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    log_to_file(project_log(project))
    try:
        log_event("replay.step", error="\x1b]52;c;cm0gLXJmIH4=\x07boom\x1b[2J\x85")
    finally:
        set_stream(None)
    shown: list[str] = []
    run_logs(project, lines=5, follow_on=False, as_json=False, write=shown.append)
    assert "error=]52;c;cm0gLXJmIH4=boom[2J" in shown[0]
    raw: list[str] = []
    run_logs(project, lines=5, follow_on=False, as_json=True, write=raw.append)
    # JSON escapes C0 characters as text; a raw C1 character is dropped, and the line stays JSON.
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in raw[0])
    assert json.loads(raw[0])["error"] == "\x1b]52;c;cm0gLXJmIH4=\x07boom\x1b[2J"
