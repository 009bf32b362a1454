"""``bir learn`` and ``bir install --learn`` as a user runs them, on a transcript shaped as Claude Code writes
one (the real binaries' transcripts are learned in ``tests/hooks/local/test_learn.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bir.cli import main
from bir.core import config
from bir.hooks.local.store import Store, default_path

ROWS = [{"type": "text", "text": '[{"id": "dev-001", "risk": 3}]'}]


def line(record: dict[str, Any]) -> str:
    return json.dumps({"sessionId": "s-1", "cwd": "/p", "version": "2.1.332", **record}) + "\n"


def transcript(project: Path, config_dir: Path) -> Path:
    folder = config_dir / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(project))
    folder.mkdir(parents=True)
    usage = {"input_tokens": 900, "output_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def said(msg_id: str, blocks: list[dict[str, Any]], stop: str) -> str:
        message = {"id": msg_id, "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks}
        return line(
            {
                "type": "assistant",
                "timestamp": "2026-11-20T10:00:01Z",
                "message": {**message, "stop_reason": stop, "usage": usage},
            }
        )

    def asked(text: str, prompt_id: str) -> str:
        message = {"role": "user", "content": text}
        return line({"type": "user", "promptId": prompt_id, "timestamp": "2026-11-20T10:00:00Z", "message": message})

    call = {"type": "tool_use", "id": "t1", "name": "mcp__fleet__list_devices", "input": {"region": "eu-west-1"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": ROWS}
    path = folder / "s-1.jsonl"
    path.write_text(
        asked("list the devices in eu-west-1", "p1")
        + said("m1", [call], "tool_use")
        + line(
            {"type": "user", "promptId": "p1", "message": {"role": "user", "content": [result]}, "toolUseResult": ROWS}
        )
        + said("m2", [{"type": "text", "text": "one device"}], "end_turn")
        + asked("what is a device", "p2")
        + said("m3", [{"type": "text", "text": "a thing"}], "end_turn")
    )
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    folder = tmp_path / "project"
    folder.mkdir()
    transcript(folder.resolve(), tmp_path / "claude")
    return folder.resolve()


def learned(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["learn", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def runs() -> int:
    path = default_path(config.home())
    if not path.exists():
        return 0
    store = Store(path)
    try:
        return store.counts()["runs"]
    finally:
        store.close()


def test_a_dry_learn_counts_what_it_would_learn_and_writes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = learned(capsys, "--project", str(project), "--dry")
    assert code == 0
    assert (data["dry"], data["turns"], data["imported"]) == (True, 2, 1)
    assert data["skipped"] == {"no tool calls": 1}
    assert runs() == 0


def test_turns_before_since_are_passed_over_and_learned_by_a_later_learn_without_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = learned(capsys, "--project", str(project), "--since", "2026-12-01")
    assert (code, data["imported"], data["skipped"]["before --since"]) == (0, 0, 2)
    code, data = learned(capsys, "--project", str(project))
    assert (code, data["imported"], data["calculated"], data["ready"]) == (0, 1, 1, 1)
    assert runs() == 1
    code, data = learned(capsys, "--project", str(project))
    assert (data["turns"], data["imported"]) == (0, 0)


def test_a_learn_says_so_in_sentences_and_refuses_a_date_it_cannot_read(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["learn", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "1 transcript of" in out
    assert "learned 1 as recorded runs" in out
    assert "1 scenario ready to replay" in out
    assert main(["learn", "--project", str(project), "--since", "last tuesday"]) == 2
    assert "is not a date" in capsys.readouterr().err


def test_learning_is_refused_when_the_machine_uses_a_remote_service(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_SERVICE", "remote")
    assert main(["learn", "--project", str(project)]) == 1
    assert "remote service" in capsys.readouterr().err


def test_a_project_claude_code_never_ran_in_has_nothing_to_learn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    code, data = learned(capsys, "--project", str(tmp_path))
    assert (code, data["folder"], data["imported"]) == (0, None, 0)


def test_install_with_learn_learns_from_the_past_sessions_without_asking(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["install", "--project", str(project), "--learn", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["learned"]["imported"] == 1
    assert runs() == 1
    # Without --learn and without a terminal, install asks nothing and learns nothing more.
    assert main(["install", "--project", str(project), "--json"]) == 0
    assert "learned" not in json.loads(capsys.readouterr().out)
