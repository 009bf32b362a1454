"""``bir learn`` and ``bir install --learn`` as a user runs them, on a transcript shaped as Claude Code writes
one (the real binaries' transcripts are learned in ``tests/hooks/local/test_learn.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from bir.cli import main
from bir.core import config
from bir.hooks.commands.learn import describe
from bir.hooks.local.store import Store, default_path
from tests.terminal import BIR, on_a_terminal

ROWS = [{"type": "text", "text": '[{"id": "dev-001", "risk": 3}]'}]


def line(record: dict[str, Any], session: str = "s-1") -> str:
    return json.dumps({"sessionId": session, "cwd": "/p", "version": "2.1.332", **record}) + "\n"


def project_transcript(tmp_path: Path) -> Path:
    """The fixture's first transcript, ``s-1.jsonl``."""
    [path] = (tmp_path / "claude" / "projects").glob("*/s-1.jsonl")
    return path


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


def region_turn(session: str, n: int) -> str:
    """One prompt turn of ``session`` listing a region's devices: the prompt, the call, its result, the answer."""
    usage = {"input_tokens": 900, "output_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    region = f"zone-{session}-{n}"
    prompt = {"role": "user", "content": f"list the devices in {region}"}
    call = {"type": "tool_use", "id": f"t{n}", "name": "mcp__fleet__list_devices", "input": {"region": region}}
    result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": ROWS}

    def said(blocks: list[dict[str, Any]], stop: str, m: int) -> str:
        message = {"id": f"{session}-m{n}-{m}", "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks}
        record = {"type": "assistant", "timestamp": "2026-11-20T10:00:01Z"}
        return line({**record, "message": {**message, "stop_reason": stop, "usage": usage}}, session)

    prompt_id = f"{session}-p{n}"
    asked = {"type": "user", "promptId": prompt_id, "timestamp": "2026-11-20T10:00:00Z", "message": prompt}
    answered = {"type": "user", "promptId": prompt_id, "message": {"role": "user", "content": [result]}}
    return (
        line(asked, session)
        + said([call], "tool_use", 1)
        + line({**answered, "toolUseResult": ROWS}, session)
        + said([{"type": "text", "text": "listed"}], "end_turn", 2)
    )


def sessions(project: Path, config_dir: Path, count: int, turns: int) -> list[Path]:
    """``count`` more transcripts of ``project``, oldest first, each with ``turns`` turns that call a tool."""
    folder = config_dir / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(project))
    now = time.time()
    written = []
    for i in range(count):
        path = folder / f"bulk-{i}.jsonl"
        path.write_text("".join(region_turn(f"bulk-{i}", n) for n in range(turns)))
        # Oldest first, by the modification time learn orders them by (and all newer than s-1.jsonl).
        os.utime(path, (now + i + 1, now + i + 1))
        written.append(path)
    return written


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


def test_a_learn_past_its_size_budget_stops_inside_a_transcript_says_so_and_the_next_goes_on_from_there(
    project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = sessions(project, tmp_path / "claude", 2, 3)
    s1 = project_transcript(tmp_path)
    # Enough for s-1.jsonl, the first transcript, and one and a half turns of the second.
    budget = (
        s1.stat().st_size + first.stat().st_size + len(region_turn("bulk-1", 0)) + len(region_turn("bulk-1", 1)) // 2
    )
    with monkeypatch.context() as patched:
        patched.setattr("bir.hooks.local.learn.MAX_TOTAL_BYTES", budget)
        code, data = learned(capsys, "--project", str(project))
    assert code == 0
    assert data["stopped"] == "size"
    assert data["bytesRead"] == budget
    # s-1's one turn with a call, the first transcript's three, the second's first: the half turn is not taken.
    assert (data["imported"], data["calculated"]) == (1 + 3 + 1, 1 + 3 + 1)
    assert "still being written" not in data["skipped"]
    assert runs() == 5
    assert "stopped early (its size budget): run bir learn again to go on from there" in describe(data)

    code, data = learned(capsys, "--project", str(project))
    assert (code, data["stopped"], data["imported"], data["calculated"]) == (0, None, 2, 2)
    # Read on from the end of the last whole turn, not again from the start.
    assert data["bytesRead"] == second.stat().st_size - len(region_turn("bulk-1", 0))
    assert runs() == 1 + 3 + 3
    code, data = learned(capsys, "--project", str(project))
    assert (data["turns"], data["imported"], data["bytesRead"]) == (0, 0, 0)


def test_a_learn_past_its_time_budget_stops_says_so_and_the_next_learns_and_calculates_the_rest_once(
    project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bir.hooks.local.learn import learn
    from bir.hooks.local.runtime import opened

    sessions(project, tmp_path / "claude", 2, 3)
    now = [0.0]

    def tick(_text: str) -> None:
        # The clock passes the budget as the first transcript is done.
        now[0] += 60.0

    async def learn_once() -> dict[str, object]:
        async with opened(config.home(), project=project, load_model=False) as service:
            report = await learn(service, project, budget_s=30.0, progress=tick, clock=lambda: now[0])
        return report.wire()

    data = anyio.run(learn_once)
    assert data["stopped"] == "time"
    # s-1.jsonl was learned; neither later transcript was read, and nothing was calculated past the budget.
    assert (data["transcripts"], data["imported"], data["calculated"]) == (3, 1, 0)
    assert "stopped early (its time budget): run bir learn again to go on from there" in describe(data)
    assert runs() == 1

    code, data = learned(capsys, "--project", str(project))
    assert (code, data["stopped"], data["imported"], data["calculated"]) == (0, None, 6, 7)
    assert runs() == 7
    code, data = learned(capsys, "--project", str(project))
    assert (data["imported"], data["calculated"]) == (0, 0)


# A secret bir knows by value (no known form), and a key recognisable by its form.
TOKEN = "q7Rw2mZk9vLx4NpT8sYd"
KEY = "ghp_" + "Z3x9Kq2Lw8Vn5Rt7Bm4Pc6Hy1Jd0Fs"


def secret_turn(session: str) -> str:
    """One turn carrying both secrets everywhere a transcript can: the prompt, a call's input, its
    structured result and its content, a failed call's error, the answer."""
    usage = {"input_tokens": 900, "output_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    leaked = f"token {TOKEN} and key {KEY}"
    rows = [{"type": "text", "text": json.dumps([{"id": "dev-001", "note": leaked}])}]
    calls = [
        {"type": "tool_use", "id": "t1", "name": "mcp__fleet__list_devices", "input": {"region": "eu-west-1"}},
        {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": f"curl -H 'X-Key: {KEY}' {TOKEN}"}},
    ]

    def said(blocks: list[dict[str, Any]], stop: str, m: int) -> str:
        message = {"id": f"{session}-m{m}", "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks}
        record = {"type": "assistant", "timestamp": "2026-11-20T10:00:01Z"}
        return line({**record, "message": {**message, "stop_reason": stop, "usage": usage}}, session)

    def result(block: dict[str, Any], structured: object) -> str:
        message = {"role": "user", "content": [block]}
        return line({"type": "user", "promptId": "p-secret", "message": message, "toolUseResult": structured}, session)

    prompt = {"role": "user", "content": f"list the devices in eu-west-1, {leaked}"}
    failed = {"type": "tool_result", "tool_use_id": "t2", "is_error": True, "content": f"refused: {leaked}"}
    return (
        line({"type": "user", "promptId": "p-secret", "timestamp": "2026-11-20T10:00:00Z", "message": prompt}, session)
        + said([calls[0]], "tool_use", 1)
        + result({"type": "tool_result", "tool_use_id": "t1", "content": rows}, rows)
        + said([calls[1]], "tool_use", 2)
        + result(failed, f"Error: refused: {leaked}")
        + said([{"type": "text", "text": f"done, {leaked}"}], "end_turn", 3)
    )


def test_a_learned_transcript_leaves_no_secret_in_the_store_or_the_logs_redacted_as_the_recorder_redacts(
    project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_SERVICE", "local")
    monkeypatch.setenv("BIR_TOKEN", TOKEN)
    [folder] = (tmp_path / "claude" / "projects").iterdir()
    (folder / "secret.jsonl").write_text(secret_turn("secret"))
    assert TOKEN.encode() in (folder / "secret.jsonl").read_bytes()

    code, data = learned(capsys, "--project", str(project))
    assert (code, data["imported"]) == (0, 2), data

    db = Store(default_path(config.home()))
    try:
        [run] = [r for r in db.runs(None) if r.metadata.get("promptId") == "p-secret"]
        listing, bash = (s.body for s in db.steps(run.id))
        assert "[REDACTED]" in run.input
        assert "[REDACTED]" in listing["toolOutput"]
        assert "[REDACTED]" in bash["error"]
        assert run.finish is not None
        assert "[REDACTED]" in run.finish["output"]
    finally:
        db.close()
    # Nowhere under BIR_HOME: the store, its write-ahead log, the logs.
    written = [p for p in config.home().rglob("*") if p.is_file()]
    assert any(p.name.endswith(".db") for p in written)
    for path in written:
        content = path.read_bytes()
        assert TOKEN.encode() not in content, path
        assert KEY.encode() not in content, path


# --- on a terminal, and without one ----------------------------------------------------------------


def test_on_a_terminal_a_learn_draws_its_progress_line_in_place_and_erases_it_and_a_pipe_gets_none(
    project: Path,
) -> None:
    env = dict(os.environ)
    code, shown = on_a_terminal(["learn", "--project", str(project)], env, [])
    assert code == 0, shown
    assert "\r\x1b[Kbir learn: reading transcripts: 1/1, 1 turns learned" in shown
    assert "\r\x1b[Kbir learn: calculating scenarios: 1/1" in shown
    # Erased before the report is printed: the report starts on a clean line.
    assert "\r\x1b[Kbir learn: 1 transcript of" in shown
    assert runs() == 1

    # A grown transcript on a pipe: learned the same, and not a byte of a progress line.
    sessions(project, project.parent / "claude", 1, 2)
    piped = subprocess.run(
        [BIR, "learn", "--project", str(project)], capture_output=True, text=True, env=env, check=False
    )
    assert piped.returncode == 0, piped.stderr
    assert "learned 2 as recorded runs" in piped.stdout
    assert (piped.stderr, "\r" in piped.stdout, "\x1b" in piped.stdout) == ("", False, False)
    assert runs() == 3


def test_on_a_terminal_install_offers_to_learn_the_past_sessions_and_learns_only_on_yes(
    project: Path,
) -> None:
    env = dict(os.environ)
    question = (
        "Claude Code has 1 past session of this project. Learn from it now, so its tasks can be replayed "
        "(bir learn)? [y/N]"
    )
    code, shown = on_a_terminal(["install", "--project", str(project)], env, ["n"])
    assert code == 0, shown
    assert question in shown
    assert "Not now: bir learn does it whenever you like." in shown
    assert runs() == 0

    code, shown = on_a_terminal(["install", "--project", str(project)], env, ["y"])
    assert code == 0, shown
    assert question in shown
    assert "bir learn: 1 transcript of" in shown
    assert "learned 1 as recorded runs" in shown
    assert runs() == 1

    # Without a terminal nothing is asked and nothing more is learned, also when there is more to learn.
    sessions(project, project.parent / "claude", 1, 2)
    piped = subprocess.run(
        [BIR, "install", "--project", str(project)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert piped.returncode == 0, piped.stderr
    assert "[y/N]" not in piped.stdout + piped.stderr
    assert "bir learn:" not in piped.stdout + piped.stderr
    assert runs() == 1
