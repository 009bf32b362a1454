"""The ``bir`` command as a person and a program meet it: a real process, its stdout, its stderr, its log file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bir import __version__

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "examples" / "scenarios" / "fleet-direct.json"
FLEET = f"{sys.executable} -m bir.examples.fleet_server"
MAIN_JOB = [
    "replay",
    "--scenario",
    str(SCENARIO),
    "--prompt",
    "find the riskiest device in eu-west-1 and show its details",
    "--param",
    "region=eu-west-1",
    "--wrap",
    f"fleet={FLEET}",
]


def bir(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bir.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        check=False,
    )


def json_lines(text: str) -> list[dict[str, object]]:
    """The log lines in ``text``: JSON objects with an ``event``."""
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "event" in value:
            found.append(value)
    return found


def test_the_main_job_prints_a_readable_account_and_no_log_line(tmp_path: Path) -> None:
    done = bir(*MAIN_JOB, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout) == []
    assert json_lines(done.stderr) == []
    assert done.stdout.count("mcp__fleet__list_devices") == 1
    assert done.stdout.count("mcp__fleet__get_device") == 1
    assert '{"id": "dev-009", "name": "eu-west-1-camera-03", "risk": 94}' in done.stdout  # text, not escaped JSON
    assert '\\"' not in done.stdout
    assert "Done: all 2 steps ran." in done.stdout
    assert "[BaseInstRunner calculated replay]" not in done.stdout
    log = Path(os.environ["BIR_HOME"]) / "logs" / "replay.log"
    events = {line["event"] for line in json_lines(log.read_text())}
    # This process, the in-process control server, and the bir-proxy child all logged to the file.
    assert {"replay.finished", "control.started", "proxy.registered", "proxy.upstream_started"} <= events


def test_the_main_job_with_json_prints_one_document_and_nothing_else(tmp_path: Path) -> None:
    done = bir(*MAIN_JOB, "--json", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["outcome"] == "done"
    assert doc["mode"] == "direct"
    assert [s["status"] for s in doc["steps"]] == ["ok", "ok"]
    assert json_lines(done.stderr) == []


def test_verbose_sends_the_log_lines_to_stderr(tmp_path: Path) -> None:
    done = bir(*MAIN_JOB, "--verbose", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    events = {line["event"] for line in json_lines(done.stderr)}
    assert {"replay.finished", "proxy.registered"} <= events
    assert json_lines(done.stdout) == []


def test_a_missing_target_is_told_in_the_operators_words_with_exit_code_3(tmp_path: Path) -> None:
    done = bir("replay", "--scenario", str(SCENARIO), "--prompt", "check the fleet", cwd=tmp_path)

    assert done.returncode == 3
    assert "Stopped before any step: no value for the target region. Pass --param region=VALUE." in done.stdout


@pytest.fixture
def listener() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback port that records whatever connects to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen.append(b"connected")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_a_bad_bir_value_is_a_one_line_error_before_any_network_call(
    tmp_path: Path, listener: tuple[str, list[bytes]]
) -> None:
    url, seen = listener
    done = bir(
        "replay",
        "--scenario",
        "scn_on_the_service",
        "--prompt",
        "check the fleet",
        env={"BIR_AUTH_URL": url, "BIR_STEP_TIMEOUT_MS": "abc"},
        cwd=tmp_path,
    )

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bir: BIR_STEP_TIMEOUT_MS must be a whole number, got 'abc' (fix it or unset it; `bir doctor` lists every "
        "bad value)"
    ]
    assert done.stdout == ""
    assert seen == []


def test_version_and_the_exit_codes_in_help() -> None:
    assert bir("--version").stdout.strip() == f"bir {__version__}"
    help_text = bir("--help").stdout
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n  {code} " in help_text


def test_config_prints_a_readable_table_and_markdown_only_when_asked() -> None:
    table = bir("config", env={"BIR_STEP_TIMEOUT_MS": "5000", "BIR_TOKEN": "tok-secret"}).stdout
    markdown = bir("config", "--markdown").stdout

    assert "|" not in table
    step = next(line for line in table.splitlines() if line.startswith("BIR_STEP_TIMEOUT_MS"))
    assert step.split() == ["BIR_STEP_TIMEOUT_MS", "5000", "60000", "environment"]
    token = next(line for line in table.splitlines() if line.startswith("BIR_TOKEN"))
    assert "tok-secret" not in table
    assert token.split() == ["BIR_TOKEN", "(set)", "unset", "environment"]
    assert markdown.startswith("| variable | default | ceiling | what it does |")
