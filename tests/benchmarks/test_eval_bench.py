"""``bir bench eval``: the corpus bodies answer what their data says, and a tiny run reports every key.

No timing is asserted: the numbers belong to the benchmark, not to the tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from bir.benchmarks import corpus
from bir.benchmarks import eval_bench as bench_module
from bir.benchmarks.corpus import CASES, MIX, Case
from bir.benchmarks.eval_bench import Counts, render_table, run_eval_bench
from bir.evaluator import EvaluatorPool

TINY = Counts(
    warmup=2,
    sequential=6,
    throughput=6,
    callers_per_worker=2,
    recycle_calls=6,
    quickjs_calls=6,
    walls_starts=1,
    walls_calls=6,
)
LATENCY_KEYS = {"calls", "p50_us", "p90_us", "p99_us", "mean_us", "sequential_calls_per_s"}


def _case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


async def _run(pool: EvaluatorPool, name: str) -> dict[str, Any]:
    case = _case(name)
    return await pool.evaluate(case.kind, case.body, *case.args_factory())


# --- the corpus --------------------------------------------------------------------------------------------


def test_the_corpus_names_each_case_once_and_keeps_mix_for_the_round_robin() -> None:
    names = [c.name for c in CASES]
    assert names == [
        "trivial",
        "parse_rank_24kb",
        "regex_scan_50kb",
        "work_1ms",
        "params_merge",
        "response_model",
    ]
    assert MIX not in names


def test_the_generated_data_is_the_same_on_every_call_and_about_the_size_each_case_is_named_for() -> None:
    for case in CASES:
        assert case.args_factory() == case.args_factory()
    device_text = _case("parse_rank_24kb").args_factory()[0]
    log_text = _case("regex_scan_50kb").args_factory()[0]
    assert isinstance(device_text, str)
    assert isinstance(log_text, str)
    assert 24 * 1024 <= len(device_text) < 26 * 1024
    assert 50 * 1024 <= len(log_text) < 53 * 1024


@pytest.mark.anyio
async def test_the_trivial_body_returns_its_two_keys(pool: EvaluatorPool) -> None:
    assert await _run(pool, "trivial") == {"region": "eu-west-1", "limit": 200}


@pytest.mark.anyio
async def test_the_ranking_body_returns_the_five_riskiest_devices_of_the_tool_output(pool: EvaluatorPool) -> None:
    rows = corpus.device_rows()
    expected = sorted(rows, key=lambda r: -int(str(r["risk"])))[:5]
    out = await _run(pool, "parse_rank_24kb")
    assert out["highestRiskDeviceId"] == expected[0]["id"]
    assert [d["id"] for d in out["topDevices"]] == [r["id"] for r in expected]
    assert out["deviceCount"] == len(rows)


@pytest.mark.anyio
async def test_the_regex_body_counts_the_log_lines_by_level(pool: EvaluatorPool) -> None:
    matches = re.findall(corpus.LOG_LINE_PATTERN, corpus.log_text(), flags=re.MULTILINE)
    levels = {level: sum(1 for m in matches if m[1] == level) for level in corpus.LOG_LEVELS}
    first = next(m for m in matches if m[1] == "ERROR")
    out = await _run(pool, "regex_scan_50kb")
    assert out == {"levels": levels, "firstError": f"{first[2]}: {first[3]}"}
    assert sum(levels.values()) > 500


@pytest.mark.anyio
async def test_the_work_body_answers_the_hash_python_computes(pool: EvaluatorPool) -> None:
    out = await _run(pool, "work_1ms")
    assert out == {"hash": corpus.work_hash(corpus.WORK_ITERATIONS), "n": corpus.WORK_ITERATIONS}


@pytest.mark.anyio
async def test_the_params_body_normalises_names_and_values(pool: EvaluatorPool) -> None:
    out = await _run(pool, "params_merge")
    assert out["region"] == "eu-west-1"
    assert out["device_limit"] == 250
    assert out["min_risk"] == 700.46
    assert out["include_tags"] == ["edge", "pci", "prod"]
    assert out["owner_email"] == "ops@example.com"
    assert out["note"] == "check the gateways first"
    assert "page_token" not in out
    assert len(out) == 19


@pytest.mark.anyio
async def test_the_response_body_assembles_the_nested_model(pool: EvaluatorPool) -> None:
    out = await _run(pool, "response_model")
    assert out["summary"]["highest"] == {"id": "dev-00000", "risk": 999}
    assert [d["rank"] for d in out["devices"]] == [1, 2, 3, 4, 5]
    assert [d["flagged"] for d in out["devices"]] == [True, True, False, False, False]
    assert out["requestedBy"] == {"user": "ops", "tags": ["prod", "edge", "pci"]}


# --- the bench ------------------------------------------------------------------------------------------------


def test_a_tiny_full_run_prints_one_json_document_with_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_eval_bench(quick=False, as_json=True, counts=TINY) == 0
    report = json.loads(capsys.readouterr().out)

    assert set(report) == {
        "version",
        "mode",
        "date",
        "machine",
        "settings",
        "cases",
        "goals",
        "case_p50_ratio_geomean",
        "recycling",
        "walls",
        "quickjs",
        "pool_stats",
        "duration_s",
    }
    assert report["mode"] == "full"
    assert set(report["machine"]) == {"cpus", "python", "v8", "loadavg_before", "loadavg_after"}
    assert report["settings"]["workers"] == 2
    assert list(report["cases"]) == [c.name for c in CASES] + [MIX]
    for row in report["cases"].values():
        assert set(row) == {
            "kind",
            "arg_bytes",
            "floor",
            "engine_in_process",
            "pool_one_worker",
            "pool_all_workers",
            "ratios",
        }
        assert set(row["floor"]) == LATENCY_KEYS
        assert set(row["engine_in_process"]) == LATENCY_KEYS
        assert set(row["pool_one_worker"]) == LATENCY_KEYS | {"callers", "calls_per_s"}
        assert row["pool_one_worker"]["calls"] == TINY.sequential
        assert set(row["pool_all_workers"]) == {"workers", "callers", "calls", "calls_per_s"}
        assert row["pool_all_workers"]["callers"] == 4
        assert set(row["ratios"]) == {"p50_vs_floor", "p99_vs_floor", "engine_p50_vs_floor", "throughput_all_vs_one"}
        assert all(isinstance(v, float) for v in row["ratios"].values())
    assert len(report["goals"]) == 3
    assert report["case_p50_ratio_geomean"] > 0
    assert all(isinstance(g["met"], bool) for g in report["goals"])
    counters = {
        "max_jobs", "margin", "workers", "load", "recycled", "past_budget", "holds", "most_jobs_per_worker",
        "job_limit", "spawn_waits", "spawn_wait_ms_max", "cold_waits",
    }  # fmt: skip
    rows = report["recycling"]
    assert [(r["max_jobs"], r["load"]) for r in rows] == [
        (2000, "sequential"),
        (2000, "saturated"),
        (100, "sequential"),
        (100, "saturated"),
    ]
    assert set(rows[0]) == counters | LATENCY_KEYS
    assert set(rows[1]) == counters | {"calls", "callers", "calls_per_s"}
    assert rows[2]["job_limit"] == 220  # the largest jittered budget, 110, times the default margin 2
    walls = report["walls"]
    assert set(walls) == {"state", "start_ms", "in_worker_ms", "mix", "ratios"}
    assert set(walls["in_worker_ms"]) == {"raise_walls", "warm_up"}
    assert set(walls["state"]) == {"no_new_privs", "landlock", "seccomp"}
    assert set(walls["start_ms"]["on"]) == {"starts", "p50", "max"}
    assert set(walls["mix"]["off"]) == LATENCY_KEYS
    assert set(walls["ratios"]) == {"start_p50_on_vs_off", "mix_p50_on_vs_off", "mix_p99_on_vs_off"}
    assert set(report["quickjs"]) == LATENCY_KEYS
    assert set(report["pool_stats"]) == {
        "one_worker",
        "all_workers",
        "recycling_2000_sequential",
        "recycling_2000_saturated",
        "recycling_100_sequential",
        "recycling_100_saturated",
        "quickjs",
    }
    assert report["pool_stats"]["one_worker"]["crashes"] == 0

    table = render_table(report)
    for name in [*report["cases"], "goals:", "max_jobs 2000, 2 workers, saturated", "walls (", "QuickJS"]:
        assert name in table


def test_a_quick_run_leaves_out_the_recycling_runs_and_quickjs(capsys: pytest.CaptureFixture[str]) -> None:
    tiny_quick = Counts(warmup=1, sequential=3, throughput=3, callers_per_worker=1, recycle_calls=0, quickjs_calls=0)
    assert run_eval_bench(quick=True, as_json=False, counts=tiny_quick) == 0
    table = capsys.readouterr().out
    assert table.startswith("bir bench eval (quick)")
    assert "QuickJS" not in table
    assert "recycling" not in table
    assert "walls (" not in table
    assert bench_module.QUICK.recycle_calls == 0
    assert bench_module.QUICK.walls_starts > 0  # the walls' cost is in a quick run too
    assert bench_module.QUICK.quickjs_calls == 0


def test_a_body_that_fails_in_the_floor_is_one_line_on_stderr_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = Case("broken", "paramsLogic", "throw new Error('boom');", lambda: ({},))
    monkeypatch.setattr(bench_module, "CASES", (broken,))
    assert run_eval_bench(quick=True, as_json=True, counts=TINY) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == "could_not_measure"
    assert "boom" in json.loads(captured.out)["message"]
    assert "bir bench eval:" not in captured.err
    assert run_eval_bench(quick=True, as_json=False, counts=TINY) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    message = [line for line in captured.err.splitlines() if line.startswith("bir bench eval:")]
    assert len(message) == 1
    assert "the in-process floor failed" in message[0]
    assert "boom" in message[0]
    assert "Traceback" not in captured.err


def test_the_floor_refuses_a_malformed_request_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-m", "bir.evaluator.bench_floor"],
        input=b'{"cases": "not a list"}',
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr.decode().count("\n") == 1
    assert done.stderr.startswith(b"bir.evaluator.bench_floor: ValidationError")


def test_importing_the_bench_does_not_load_v8_into_the_bench_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, bir.benchmarks.eval_bench; print('py_mini_racer' in sys.modules)"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == b"False"
