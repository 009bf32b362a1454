"""Capped serialization and cutting: the bounds hold on every path."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bir.core.truncate import cut, cut_counted, serialize_capped

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)


@given(st.text(), st.integers(min_value=0, max_value=300), st.text(max_size=20))
def test_cut_never_exceeds_its_limit(text: str, max_chars: int, marker: str) -> None:
    out = cut(text, max_chars, marker)
    assert len(out) <= max_chars
    if len(text) <= max_chars:
        assert out == text
    else:
        assert text.startswith(out[: max(0, max_chars - len(marker))])


@given(json_values, st.integers(min_value=1, max_value=400))
def test_serialize_capped_never_exceeds_its_limit(value: object, max_chars: int) -> None:
    assert len(serialize_capped(value, max_chars)) <= max_chars


@given(st.text(), st.integers(min_value=0, max_value=500))
def test_a_counted_cut_reports_exactly_what_it_cut(text: str, max_chars: int) -> None:
    out = cut_counted(text, max_chars)
    assert len(out) <= max_chars
    if len(text) > max_chars and "…[truncated " in out:
        head, _, tail = out.rpartition("…[truncated ")
        assert int(tail.removesuffix(" chars]")) == len(text) - len(head)
        assert text.startswith(head)


def test_a_small_value_is_compact_json_with_unicode_kept() -> None:
    assert serialize_capped({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


def test_a_long_value_is_cut_with_a_marker_naming_the_count() -> None:
    out = serialize_capped("x" * 1000, 100)
    assert len(out) <= 100
    assert out.endswith(" chars]")
    assert "…[truncated " in out


def test_values_json_cannot_hold_are_written_as_text() -> None:
    class Thing:
        def __str__(self) -> str:
            return "thing!"

    assert json.loads(serialize_capped({"t": Thing(), "s": {1, 2} and "set"})) == {"t": "thing!", "s": "set"}
    assert json.loads(serialize_capped({"n": math.nan, "i": -math.inf})) == {"n": None, "i": None}
    assert json.loads(serialize_capped({(1, 2): "tuple key"})) == {"(1, 2)": "tuple key"}


def test_a_cycle_is_serialized_without_failing() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    assert json.loads(serialize_capped(loop)) == [1, "[circular]"]


def test_a_bad_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        serialize_capped("x", 0)
    with pytest.raises(ValueError, match="max_chars"):
        cut("x", -1)


def test_cut_prefers_content_when_the_marker_does_not_fit() -> None:
    assert cut("abcdef", 2, marker="...") == "ab"
    assert cut("abcdef", 4, marker="…") == "abc…"
    assert cut("abc", 3) == "abc"
