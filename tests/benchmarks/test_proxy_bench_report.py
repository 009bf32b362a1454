"""The pure half of ``bir bench proxy``: summaries, comparisons and the table."""

from __future__ import annotations

import json

import pytest

from bir.benchmarks.proxy_bench_report import (
    TOOLS,
    VARIANTS,
    build_report,
    compare,
    render_table,
    summarize,
)

_META = {"iterations": 4, "warmup": 1, "loadavg_1m": 0.2, "cpu_count": 2}


def test_a_summary_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


def test_a_summary_is_in_milliseconds() -> None:
    summary = summarize([3_000_000, 1_000_000, 2_000_000, 4_000_000])
    assert summary == {
        "n": 4,
        "p50_ms": 2.0,
        "p90_ms": 4.0,
        "p99_ms": 4.0,
        "mean_ms": 2.5,
        "min_ms": 1.0,
        "max_ms": 4.0,
    }


def test_a_comparison_gives_the_added_time_and_ratio_and_no_infinity() -> None:
    base = {"p50_ms": 2.0, "p99_ms": 4.0}
    assert compare(base, {"p50_ms": 3.0, "p99_ms": 10.0}) == {
        "added_p50_ms": 1.0,
        "added_p99_ms": 6.0,
        "ratio_p50": 1.5,
        "ratio_p99": 2.5,
    }
    zero = compare({"p50_ms": 0.0, "p99_ms": 0.0}, {"p50_ms": 1.0, "p99_ms": 1.0})
    assert (zero["ratio_p50"], zero["ratio_p99"]) == (None, None)
    json.dumps(zero, allow_nan=False)


def _samples(scale: int) -> dict[str, dict[str, list[int]]]:
    return {
        tool: {variant: [scale * (i + 1) * (v + 1) for i in range(4)] for v, variant in enumerate(VARIANTS)}
        for tool in TOOLS
    }


def test_the_report_compares_every_relayed_path_and_the_step_with_direct() -> None:
    report = build_report(_samples(1_000_000), [10_000_000] * 4, meta=_META)
    assert report["iterations"] == 4
    assert report["added"]["get_device"]["relayed"]["ratio_p50"] == 2.0
    assert report["added"]["list_devices"]["relayed_control"]["ratio_p99"] == 3.0
    assert report["step_round_trip"]["vs_direct_get_device"]["ratio_p50"] == 5.0
    json.dumps(report, allow_nan=False)


def test_a_missing_series_is_refused() -> None:
    samples = _samples(1_000_000)
    del samples["list_devices"]["relayed"]
    with pytest.raises(KeyError):
        build_report(samples, [1], meta=_META)


def test_the_table_has_a_row_per_path_and_a_ratio_per_comparison() -> None:
    table = render_table(build_report(_samples(1_000_000), [10_000_000] * 4, meta=_META))
    lines = table.splitlines()
    assert lines[0].startswith("bir bench proxy: 4 calls per row after 1 warm-up rounds, load 0.20 on 2 CPUs")
    assert sum(1 for line in lines if line.startswith(("get_device ", "list_devices "))) == 7
    assert "get_device, relayed (--no-control)" in table
    assert "   2.00x" in table
    assert table.endswith("\n")
