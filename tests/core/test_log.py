"""The one logging helper: one bounded JSON object per line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from bir.core import log


def _capture(event: str, **fields: object) -> dict[str, object]:
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        log.log_event(event, **fields)
    finally:
        log.set_stream(None)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    parsed: dict[str, object] = json.loads(lines[0])
    return parsed


def test_a_log_line_is_one_json_object_with_its_event() -> None:
    line = _capture("replay.decision", reason="match_timeout", similarity=0.93)
    assert line["event"] == "replay.decision"
    assert line["reason"] == "match_timeout"
    assert line["similarity"] == 0.93


def test_a_huge_field_is_cut_and_the_line_stays_bounded() -> None:
    line = _capture("evaluator.worker_stderr", line="x" * 200_000, nested={"deep": ["y" * 50_000] * 100})
    assert len(json.dumps(line)) <= log.MAX_LINE_CHARS + 200
    assert line["event"] == "evaluator.worker_stderr"
    assert line.get("truncated") is True or str(line["line"]).startswith("x")


def test_a_value_that_is_not_json_is_shown_as_text() -> None:
    line = _capture("x", value=object(), items={1, 2})
    assert isinstance(line["value"], str)


def test_logging_never_raises_even_when_the_stream_is_broken() -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("gone")

    log.set_stream(Broken())
    try:
        log.log_event("x", a=1)
    finally:
        log.set_stream(None)


def test_log_lines_go_to_a_private_file_that_rotates_past_its_size(tmp_path: Path) -> None:
    target = tmp_path / "logs" / "control.log"
    log.log_to_file(target, max_bytes=2_000)
    try:
        for i in range(40):
            log.log_event("test.line", i=i, pad="x" * 100)
    finally:
        log.set_stream(None)
    assert (target.stat().st_mode & 0o777) == 0o600
    rotated = target.with_name("control.log.1")
    assert rotated.exists()
    assert target.stat().st_size <= 2_000 + 400
    lines = [json.loads(line) for path in (rotated, target) for line in path.read_text().splitlines()]
    assert lines[-1]["i"] == 39
    assert all(line["event"] == "test.line" for line in lines)


def test_a_block_that_sent_lines_elsewhere_hands_them_back_to_the_file_they_went_to_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "logs" / "bir.log"
    log.log_to_file(before)
    try:
        with log.restored():
            log.set_stream(None)
            log.log_event("test.inside")
        log.log_event("test.after")
    finally:
        log.set_stream(None)
    assert '"test.inside"' in capsys.readouterr().err
    assert [json.loads(line)["event"] for line in before.read_text().splitlines()] == ["test.after"]


def test_no_known_secret_and_no_userinfo_is_ever_written_to_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIR_TOKEN", "plainwordsecret")
    error = "GET https://me:pw@basein.example.com with plainwordsecret"
    line = log.format_event("service.request_failed", {"error": error})
    assert "plainwordsecret" not in line
    assert ":pw@" not in line
    assert "https://***@basein.example.com" in line
