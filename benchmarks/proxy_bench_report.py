"""What ``bir bench proxy`` reports: latency summaries, the proxy's added cost, the table.

Pure functions over lists of nanosecond samples; the harness that takes them is ``bir.benchmarks.proxy_bench``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from bir.benchmarks.stats import percentile

# The rows of the calls table, in the order they are printed.
VARIANTS: Final = ("direct", "relayed", "relayed_control")
TOOLS: Final = ("get_device", "list_devices")
_VARIANT_LABELS: Final = {
    "direct": "direct",
    "relayed": "relayed (--no-control)",
    "relayed_control": "relayed, control known",
}
_STAT_KEYS: Final = ("n", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms")


def summarize(samples_ns: Sequence[int]) -> dict[str, float]:
    """``n``, p50/p90/p99, mean, min and max of one series, in milliseconds.

    Raises:
        ValueError: the series is empty.
    """
    if not samples_ns:
        raise ValueError("no samples to summarize")
    ms = sorted(s / 1e6 for s in samples_ns)
    return {
        "n": len(ms),
        "p50_ms": _round(percentile(ms, 0.50)),
        "p90_ms": _round(percentile(ms, 0.90)),
        "p99_ms": _round(percentile(ms, 0.99)),
        "mean_ms": _round(sum(ms) / len(ms)),
        "min_ms": _round(ms[0]),
        "max_ms": _round(ms[-1]),
    }


def compare(base: Mapping[str, float], other: Mapping[str, float]) -> dict[str, float | None]:
    """What ``other`` costs over ``base``: the added p50/p99 in ms and the p50/p99 ratios.

    A ratio over a zero base is None (it cannot be told), never an infinity in the JSON.
    """
    return {
        "added_p50_ms": _round(other["p50_ms"] - base["p50_ms"]),
        "added_p99_ms": _round(other["p99_ms"] - base["p99_ms"]),
        "ratio_p50": _ratio(other["p50_ms"], base["p50_ms"]),
        "ratio_p99": _ratio(other["p99_ms"], base["p99_ms"]),
    }


def build_report(
    samples: Mapping[str, Mapping[str, Sequence[int]]],
    step_samples: Sequence[int],
    *,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The bench's JSON document from its raw series.

    ``samples[tool][variant]`` holds one series per tool in `TOOLS` and variant in `VARIANTS`;
    ``step_samples`` the direct steps' round trips (they call ``get_device``).

    Raises:
        KeyError: a tool or variant series is missing.
        ValueError: a series is empty.
    """
    calls = {tool: {variant: summarize(samples[tool][variant]) for variant in VARIANTS} for tool in TOOLS}
    added = {
        tool: {variant: compare(calls[tool]["direct"], calls[tool][variant]) for variant in VARIANTS[1:]}
        for tool in TOOLS
    }
    step = summarize(step_samples)
    return {
        **meta,
        "calls": calls,
        "added": added,
        "step_round_trip": {
            **step,
            "vs_direct_get_device": compare(calls["get_device"]["direct"], step),
            "vs_relayed_control_get_device": compare(calls["get_device"]["relayed_control"], step),
        },
    }


def render_table(report: Mapping[str, Any]) -> str:
    """The report as a readable table with its ratios (what ``bir bench proxy`` prints)."""
    lines = [
        f"bir bench proxy: {report['iterations']} calls per row after {report['warmup']} warm-up rounds, "
        f"load {report['loadavg_1m']:.2f} on {report['cpu_count']} CPUs",
        "",
        f"{'tools/call':<14}{'path':<26}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}",
    ]
    for tool in TOOLS:
        for variant in VARIANTS:
            lines.append(_stats_line(tool, _VARIANT_LABELS[variant], report["calls"][tool][variant]))
    step = report["step_round_trip"]
    lines.append(_stats_line("get_device", "direct step (queue)", step))
    lines += ["", f"{'added over direct':<40}{'+p50 ms':>9}{'+p99 ms':>9}{'x p50':>8}{'x p99':>8}"]
    for tool in TOOLS:
        for variant in VARIANTS[1:]:
            lines.append(_added_line(f"{tool}, {_VARIANT_LABELS[variant]}", report["added"][tool][variant]))
    lines.append(_added_line("direct step vs direct get_device", step["vs_direct_get_device"]))
    lines.append(_added_line("direct step vs relayed+control get", step["vs_relayed_control_get_device"]))
    return "\n".join(lines) + "\n"


def _stats_line(tool: str, path: str, row: Mapping[str, float]) -> str:
    return f"{tool:<14}{path:<26}{row['p50_ms']:>9.3f}{row['p90_ms']:>9.3f}{row['p99_ms']:>9.3f}"


def _added_line(label: str, row: Mapping[str, float | None]) -> str:
    added = f"{row['added_p50_ms']:>+9.3f}{row['added_p99_ms']:>+9.3f}"
    return f"{label:<40}{added}{_x(row['ratio_p50'])}{_x(row['ratio_p99'])}"


def _x(ratio: float | None) -> str:
    return f"{'n/a':>8}" if ratio is None else f"{ratio:>7.2f}x"


def _ratio(value: float, base: float) -> float | None:
    return None if base <= 0 else round(value / base, 3)


def _round(value: float) -> float:
    return round(value, 4)
