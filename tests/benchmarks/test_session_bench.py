"""``bir bench pin``'s whole session: a real Claude Code with no hooks, bare Python hooks, empty ``mcp_tool``
hooks and bir's (the default install, with ``--replay``, and with ``--command-hooks``). Shape and honesty,
never speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bir.benchmarks.pin_bench import Counts, measure, render_table
from bir.benchmarks.session_bench import NOT_AT_HAND, find_claude_binary, measure_sessions
from tests.peers import CLAUDE_CODE_VERSIONS, INSTALLING_TEST_TIMEOUT_S, claude_code


def _binary(root: Path, version: str) -> Path:
    binary = root / ".peers" / f"claude-code-{version}" / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64"
    binary.mkdir(parents=True)
    (binary / "claude").write_text("#!/bin/sh\n")
    (binary / "claude").chmod(0o755)
    return binary / "claude"


def test_the_newest_claude_code_the_peers_installed_is_the_one_used(tmp_path: Path) -> None:
    assert find_claude_binary(tmp_path, path="") is None
    _binary(tmp_path, "2.1.197")
    newest = _binary(tmp_path, "2.1.332")
    _binary(tmp_path, "2.1.40")
    assert find_claude_binary(tmp_path, path="") == newest


def test_claude_on_path_is_found_before_the_test_peers(tmp_path: Path) -> None:
    _binary(tmp_path, "2.1.332")
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "claude").write_text("#!/bin/sh\n")
    (folder / "claude").chmod(0o755)
    assert find_claude_binary(tmp_path, path=f"/nonexistent:{folder}") == folder / "claude"


def test_with_no_binary_at_hand_the_session_is_said_not_measured() -> None:
    assert measure_sessions(None, calls=3, rounds=1) == {"measured": False, "why": NOT_AT_HAND}


@pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)
def test_a_real_session_measures_each_variant_and_derives_what_the_hooks_add() -> None:
    binary = claude_code(CLAUDE_CODE_VERSIONS[0])
    session = measure_sessions(binary, calls=3, rounds=1)
    assert session["measured"] is True
    assert session["claude"] == str(binary)
    rows = session["tool_call"]
    variants = ("python_hooks", "mcp_hooks", "bir_default", "bir_replay", "bir_command_hooks")
    assert set(rows) == {"no_hooks", *variants}
    for row in rows.values():
        # Three calls make three gaps between requests; the first is left out.
        assert row["calls"] == 2
        assert 0 < row["p50_ms"] <= row["p90_ms"]
    added, versus = session["added_per_call_p50_ms"], session["vs_no_hooks_p50"]
    for variant in variants:
        assert added[variant] == round(rows[variant]["p50_ms"] - rows["no_hooks"]["p50_ms"], 1)
        assert versus[variant] == round(rows[variant]["p50_ms"] / rows["no_hooks"]["p50_ms"], 2)


@pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)
def test_the_report_judges_the_session_goal_on_the_figures_it_measured() -> None:
    binary = claude_code(CLAUDE_CODE_VERSIONS[0])
    report = measure(Counts(warmup=0, calls=2, session_calls=3, session_rounds=1), mode="tiny", claude=binary)
    versus = report["session"]["vs_no_hooks_p50"]
    [goal] = report["goals"][2:]
    assert (goal["value"], goal["target"]) == (versus["bir_default"], 1.1)
    assert goal["met"] is (versus["bir_default"] <= 1.1)
    assert "the default install" in goal["goal"]
    text = render_table(report)
    assert "whole session (1 x 3 Bash calls per variant)" in text
    assert "bir install (mcp_tool hooks, the default)" in text
    assert "bir install --command-hooks" in text
