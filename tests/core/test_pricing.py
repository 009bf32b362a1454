from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bir.core.pricing import (
    LOCAL_ADDITIONS,
    LOCAL_ADDITIONS_VERSION,
    MODEL_PRICING,
    PRICING_VERSION,
    cost_usd,
    is_priced,
    price_of,
    total_cost_usd,
)

MILLION = 1_000_000


def test_the_pricing_version_is_the_services() -> None:
    assert PRICING_VERSION == "2026-08-30"


def test_opus_4_6_is_priced_at_baseins_rate_not_rrepeats() -> None:
    assert cost_usd("claude-opus-4-6", {"input_tokens": MILLION}) == pytest.approx(5.0)
    assert cost_usd("claude-opus-4-6", {"output_tokens": MILLION}) == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("model", "input_price", "output_price"),
    [
        ("claude-opus-4-5", 5.0, 25.0),
        ("claude-opus-4-1", 15.0, 75.0),
        ("claude-sonnet-4-5", 3.0, 15.0),
        ("claude-sonnet-4", 3.0, 15.0),
        ("claude-haiku-4-5-20251001", 1.0, 5.0),
        ("claude-haiku-4-5", 1.0, 5.0),
        ("claude-3-5-haiku", 0.8, 4.0),
    ],
)
def test_every_row_of_the_table_prices_input_and_output(model: str, input_price: float, output_price: float) -> None:
    assert cost_usd(model, {"input_tokens": MILLION, "output_tokens": MILLION}) == pytest.approx(
        input_price + output_price
    )


def test_cache_writes_cost_a_quarter_more_than_input_and_cache_reads_a_tenth() -> None:
    assert cost_usd("claude-sonnet-4-5", {"cache_creation_input_tokens": MILLION}) == pytest.approx(3.75)
    assert cost_usd("claude-sonnet-4-5", {"cache_read_input_tokens": MILLION}) == pytest.approx(0.3)


def test_a_dated_id_is_priced_by_the_longest_known_id_it_extends() -> None:
    assert price_of("claude-sonnet-4-5-20250929") is MODEL_PRICING["claude-sonnet-4-5"]
    assert price_of("claude-sonnet-4-20250514") is MODEL_PRICING["claude-sonnet-4"]
    assert price_of("claude-opus-4-1-20250805") is MODEL_PRICING["claude-opus-4-1"]
    assert price_of("claude-3-5-haiku-20241022") is MODEL_PRICING["claude-3-5-haiku"]
    assert price_of("claude-3-5-haiku-latest") is MODEL_PRICING["claude-3-5-haiku"]


def test_a_newer_model_that_merely_starts_like_a_known_one_is_not_guessed() -> None:
    assert price_of("claude-opus-4-9") is None
    assert price_of("claude-sonnet-4-7") is None
    assert not is_priced("claude-opus-4-9")


def test_the_model_claude_code_runs_by_default_is_priced_by_the_dated_additions_with_its_own_cache_prices() -> None:
    assert LOCAL_ADDITIONS_VERSION == "2026-12-01"
    assert cost_usd("claude-opus-5-5", {"input_tokens": MILLION, "output_tokens": MILLION}) == pytest.approx(24.0)
    assert cost_usd("claude-opus-5-5", {"cache_read_input_tokens": MILLION}) == pytest.approx(0.2)
    assert cost_usd("claude-opus-5-5", {"cache_creation_input_tokens": MILLION}) == pytest.approx(5.0)
    assert cost_usd("claude-haiku-5-5", {"cache_read_input_tokens": MILLION}) == pytest.approx(0.01)
    # The additions change no row of BaseIn's table.
    assert not set(LOCAL_ADDITIONS) & set(MODEL_PRICING)


def test_an_unknown_model_costs_nothing_and_says_it_is_unpriced() -> None:
    assert cost_usd("gpt-4o", {"input_tokens": MILLION}) == 0.0
    assert not is_priced("gpt-4o")


def test_counts_that_are_not_counts_are_ignored() -> None:
    usage: dict[str, object] = {
        "input_tokens": "1000",
        "output_tokens": -5,
        "cache_read_input_tokens": True,
        "cache_creation_input_tokens": None,
    }
    assert cost_usd("claude-opus-4-6", usage) == 0.0


def test_a_sum_over_models_is_unpriced_only_when_an_unknown_model_spent_tokens() -> None:
    cost, priced = total_cost_usd(
        [("claude-haiku-4-5", {"input_tokens": MILLION}), ("<synthetic>", {"input_tokens": 0, "output_tokens": 0})]
    )
    assert cost == pytest.approx(1.0)
    assert priced
    cost, priced = total_cost_usd([("claude-haiku-4-5", {"input_tokens": MILLION}), ("mystery", {"input_tokens": 1})])
    assert cost == pytest.approx(1.0)
    assert not priced


counts = st.one_of(st.integers(min_value=-(10**15), max_value=10**18), st.none(), st.text(max_size=3))


@settings(deadline=None)
@given(
    st.sampled_from([*MODEL_PRICING, "claude-opus-4-6-20260101", "unknown"]),
    st.fixed_dictionaries(
        {
            "input_tokens": counts,
            "output_tokens": counts,
            "cache_creation_input_tokens": counts,
            "cache_read_input_tokens": counts,
        }
    ),
)
def test_a_cost_is_always_finite_and_never_negative(model: str, usage: dict[str, object]) -> None:
    cost = cost_usd(model, usage)
    assert math.isfinite(cost)
    assert cost >= 0.0
