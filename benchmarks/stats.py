"""The one percentile every bench reports with.

Nearest rank: the value at rank ``ceil(fraction * n)`` of the sorted samples. It is always a latency
some call really had (interpolating methods such as ``statistics.quantiles`` report values between two
calls that no call took), it never falls below the true fraction of samples, and with few samples the
p99 is the slowest call: an honest tail rather than a smoothed one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values (``fraction`` in 0..1).

    Raises:
        ValueError: no values, or ``fraction`` outside 0..1.
    """
    if not sorted_values:
        raise ValueError("no samples to take a percentile of")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a percentile fraction is between 0 and 1, not {fraction}")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]
