"""Model prices, copied from BaseIn's table (spec §11.3), and the cost of an Anthropic ``usage`` mapping.

A saving is ``baseline − actual``: the service prices the baseline, this table prices the actual, and
``PRICING_VERSION`` is the claim that the two are comparable. So this is BaseIn's table, not RRepeat's
(which prices ``claude-opus-4-6`` at 3/15 under the same version): a price change here is a change on
the service too, under a new version.

Prices are USD per million tokens, input and output. Cache writes cost 1.25× the input price and cache
reads 0.1× (Anthropic's convention for the 5-minute cache, which is what Claude Code writes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

PRICING_VERSION: Final = "2026-08-30"

CACHE_WRITE_MULTIPLIER: Final = 1.25
CACHE_READ_MULTIPLIER: Final = 0.1

# A token count past this is not a real count; it is held here so a cost can never overflow to inf.
_MAX_TOKENS: Final = 10**12


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens; a cache price not given follows the input price by the usual multipliers."""

    input_per_mtok: float
    output_per_mtok: float
    cache_write: float | None = None
    cache_read: float | None = None

    @property
    def cache_write_per_mtok(self) -> float:
        return self.cache_write if self.cache_write is not None else self.input_per_mtok * CACHE_WRITE_MULTIPLIER

    @property
    def cache_read_per_mtok(self) -> float:
        return self.cache_read if self.cache_read is not None else self.input_per_mtok * CACHE_READ_MULTIPLIER


MODEL_PRICING: Final[Mapping[str, ModelPrice]] = MappingProxyType(
    {
        "claude-opus-4-6": ModelPrice(5.0, 25.0),
        "claude-opus-4-5": ModelPrice(5.0, 25.0),
        "claude-opus-4-1": ModelPrice(15.0, 75.0),
        "claude-sonnet-4-5": ModelPrice(3.0, 15.0),
        "claude-sonnet-4": ModelPrice(3.0, 15.0),
        "claude-haiku-4-5-20251001": ModelPrice(1.0, 5.0),
        "claude-haiku-4-5": ModelPrice(1.0, 5.0),
        "claude-3-5-haiku": ModelPrice(0.8, 4.0),
    }
)

# Dated local additions: the models Claude Code itself prices (its 2.1.332 model catalog, read 2026-12-01) that
# BaseIn's table above lacks. Claude Code 2.1.332 runs claude-opus-5-5 by default: without these rows a
# default session's turn was unpriced and so never measured. No row above changes, so a report on a model of
# BaseIn's table stays comparable under PRICING_VERSION; the remote service should learn these rows under a
# new version of its own (spec §11.3: a price change is a change on the service too). Cache writes are the
# 5-minute ones; the long-prompt surcharge the catalog lists for claude-haiku-5-5 is not applied.
LOCAL_ADDITIONS_VERSION: Final = "2026-12-01"
LOCAL_ADDITIONS: Final[Mapping[str, ModelPrice]] = MappingProxyType(
    {
        "claude-opus-5-5": ModelPrice(4.0, 20.0, cache_write=5.0, cache_read=0.2),
        "claude-opus-5": ModelPrice(5.0, 25.0),
        "claude-opus-4-8": ModelPrice(5.0, 25.0),
        "claude-opus-4-7": ModelPrice(5.0, 25.0),
        "claude-opus-4-0": ModelPrice(15.0, 75.0),
        "claude-sonnet-5-5": ModelPrice(2.0, 10.0, cache_write=2.5, cache_read=0.1),
        "claude-sonnet-5": ModelPrice(2.0, 10.0),
        "claude-sonnet-4-6": ModelPrice(3.0, 15.0),
        "claude-sonnet-4-0": ModelPrice(3.0, 15.0),
        "claude-3-7-sonnet": ModelPrice(3.0, 15.0),
        "claude-3-5-sonnet": ModelPrice(3.0, 15.0),
        "claude-haiku-5-5": ModelPrice(0.1, 0.5, cache_write=0.125, cache_read=0.01),
    }
)
_ALL_PRICES: Final[Mapping[str, ModelPrice]] = MappingProxyType({**LOCAL_ADDITIONS, **MODEL_PRICING})

# What may follow a known id for the longer name to be the same model: a date (``-20251001``, Vertex's
# ``@20251001``) or ``-latest``, then anything. A bare prefix is not enough: ``claude-opus-4-7`` starts
# with no known id's date, and pricing it as some older row would be a silent lie, so it stays unknown.
_SUFFIX = re.compile(r"[-@](?:\d{8}|latest)(?:\W.*)?", re.DOTALL)


def price_of(model: str) -> ModelPrice | None:
    """The price row for ``model``: its exact id, else the longest known id it extends by a date suffix."""
    exact = _ALL_PRICES.get(model)
    if exact is not None:
        return exact
    best: str | None = None
    for known in _ALL_PRICES:
        extends = model.startswith(known) and _SUFFIX.fullmatch(model[len(known) :]) is not None
        if extends and (best is None or len(known) > len(best)):
            best = known
    return _ALL_PRICES[best] if best is not None else None


def is_priced(model: str) -> bool:
    """Whether ``model`` has a price here; a report with usage on an unpriced model is unmeasured."""
    return price_of(model) is not None


USAGE_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def token_count(usage: Mapping[str, object], key: str) -> int:
    """One count of a ``usage`` mapping: 0 when missing, negative or not an integer; held under 10**12."""
    value = usage.get(key)
    # bool is an int in Python and never a token count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return min(value, _MAX_TOKENS)


def usage_tokens(usage: Mapping[str, object]) -> int:
    """Every token a usage mapping counts, of any kind (0 for anything that is not a count)."""
    return sum(token_count(usage, key) for key in USAGE_FIELDS)


def cost_usd(model: str, usage: Mapping[str, object]) -> float:
    """The cost in USD of one Anthropic ``usage`` mapping on ``model``.

    Missing or non-integer counts are 0. An unknown model costs 0: check ``is_priced`` to know whether
    that 0 is a measurement.
    """
    price = price_of(model)
    if price is None:
        return 0.0
    total = (
        token_count(usage, "input_tokens") * price.input_per_mtok
        + token_count(usage, "output_tokens") * price.output_per_mtok
        + token_count(usage, "cache_creation_input_tokens") * price.cache_write_per_mtok
        + token_count(usage, "cache_read_input_tokens") * price.cache_read_per_mtok
    )
    cost = total / 1_000_000
    return cost if math.isfinite(cost) else 0.0


def total_cost_usd(usages: Iterable[tuple[str, Mapping[str, object]]]) -> tuple[float, bool]:
    """The summed cost of ``(model, usage)`` pairs, and whether every token of them was priced.

    A model with no tokens at all (Claude Code's ``<synthetic>`` messages) does not make the sum
    unpriced: there is nothing of it to price.
    """
    total = 0.0
    priced = True
    for model, usage in usages:
        if not is_priced(model):
            if usage_tokens(usage) > 0:
                priced = False
            continue
        total += cost_usd(model, usage)
    return total, priced
