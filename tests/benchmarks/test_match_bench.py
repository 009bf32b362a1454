"""``bir bench match --quick`` runs end to end and reports every figure the issue's goals name."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_quick_match_bench_reports_latency_memory_accuracy_and_the_calculation() -> None:
    # The bench's service logs to <BIR_HOME>/logs/bench.log, not to the terminal.
    done = subprocess.run(
        [sys.executable, "-m", "bir.cli", "bench", "match", "--quick", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"event"' not in done.stderr
    report = json.loads(done.stdout)
    assert report["store"]["scenarios"] == 1000
    assert report["match"]["prompts"] == 60
    assert report["match"]["p50_ms"] > 0
    # The same prompts without the vector cache, in the same run; and the forward pass on its own.
    match = report["match"]
    assert match["before"]["prompts"] == 60
    assert match["before"]["with_embedding"]["prompts"] == match["with_embedding"]["prompts"]
    assert match["before"]["from_the_cache"]["prompts"] == 0
    assert (
        match["forward_pass_needed"]["prompts"] + match["from_the_cache"]["prompts"]
        == match["with_embedding"]["prompts"]
    )
    assert set(match["after_over_before"]) == {"p50_ms", "p99_ms"}
    assert match["forward_pass"]["cpu_ms"] > 0
    assert report["model"]["load_s"] > 0
    assert report["matcher_added_mb"] > 0
    assert report["calculation"]["state"] == "ready"
    accuracy = report["accuracy"]
    assert accuracy["different_task"]["ours_hits"] == 0
    assert accuracy["unrelated"]["ours_hits"] == 0
    assert accuracy["same_task"]["ours_right"] >= 0.9 * accuracy["same_task"]["pairs"]
    assert set(accuracy["same_task"]) >= {"service_hits", "service_right", "raw_cosine"}
