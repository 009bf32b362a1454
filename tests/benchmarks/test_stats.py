"""The one percentile the benches report with."""

from __future__ import annotations

import pytest

from bir.benchmarks.eval_bench import percentiles
from bir.benchmarks.stats import percentile


def test_a_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.9), percentile(values, 0.99)) == (50.0, 90.0, 99.0)
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([1.0, 2.0], 0.0) == 1.0


def test_a_percentile_of_nothing_or_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        percentile([1.0], 1.5)


def test_the_eval_bench_reports_nearest_rank_percentiles_in_microseconds() -> None:
    samples_ns = [n * 1000 for n in range(100, 0, -1)]
    assert percentiles(samples_ns) == (50.0, 90.0, 99.0)
    assert percentiles([]) == (0.0, 0.0, 0.0)
