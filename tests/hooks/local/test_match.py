"""The matching cascade on the matcher corpus: no false hit on another task, the same task found with its values."""

from __future__ import annotations

import pytest

from bir.benchmarks.match_corpus import PAIRS, corpus_index, scenario_of
from bir.hooks.local import match
from bir.hooks.local.embed import MiniLM


@pytest.fixture(scope="module")
def model() -> MiniLM:
    return MiniLM.load()


@pytest.fixture(scope="module")
def index(model: MiniLM) -> match.MatchIndex:
    return corpus_index(model.embed)


def _run(index: match.MatchIndex, model: MiniLM, prompt: str) -> match.Hit | match.Miss:
    return index.match(prompt, project="/p", embed=model.embed, min_similarity=0.92)


def test_no_prompt_of_another_task_or_of_nothing_recorded_matches(index: match.MatchIndex, model: MiniLM) -> None:
    false_hits = [
        (p.new, found.scenario_id, found.rule)
        for p in PAIRS
        if p.kind in ("different_task", "unrelated") and isinstance(found := _run(index, model, p.new), match.Hit)
    ]
    assert false_hits == []


def test_at_least_nine_in_ten_same_task_prompts_match_their_scenario_with_the_right_values(
    index: match.MatchIndex, model: MiniLM
) -> None:
    same = [p for p in PAIRS if p.kind == "same_task"]
    right = []
    for pair in same:
        found = _run(index, model, pair.new)
        if isinstance(found, match.Hit) and found.scenario_id == scenario_of(pair.recorded):
            right.append(found.values == pair.expected)
    assert len(same) >= 10
    assert sum(right) >= 0.9 * len(same)


def test_a_paraphrase_that_matches_carries_the_recorded_task_and_its_values(
    index: match.MatchIndex, model: MiniLM
) -> None:
    for pair in (p for p in PAIRS if p.kind == "paraphrase"):
        found = _run(index, model, pair.new)
        if isinstance(found, match.Hit):
            assert found.scenario_id == scenario_of(pair.recorded)
            assert found.values == pair.expected
            assert found.rule == "embedding"


def test_the_same_prompt_matches_exactly_and_answers_the_recorded_values(
    index: match.MatchIndex, model: MiniLM
) -> None:
    found = _run(index, model, "  Show issue #4512 ")
    assert isinstance(found, match.Hit)
    assert (found.rule, found.values, found.similarity) == ("exact", {"issue": 4512}, 1.0)


def test_a_miss_costs_no_embedding_when_no_candidate_shares_the_words(index: match.MatchIndex) -> None:
    asked: list[str] = []

    def embed(text: str) -> None:
        asked.append(text)

    found = index.match("write a haiku about autumn", project="/p", embed=embed, min_similarity=0.92)
    assert isinstance(found, match.Miss)
    assert asked == []


def test_another_projects_scenarios_are_not_candidates_unless_asked(model: MiniLM) -> None:
    index = corpus_index(None, project="/other")
    assert isinstance(index.match("show issue #4513", project="/p", embed=None, min_similarity=0.92), match.Miss)
    assert isinstance(index.match("show issue #4513", project=None, embed=None, min_similarity=0.92), match.Hit)


def test_without_the_model_a_prompt_still_matches_by_slot(index: match.MatchIndex) -> None:
    found = index.match("show issue #77", project="/p", embed=None, min_similarity=0.92)
    assert isinstance(found, match.Hit)
    assert (found.rule, found.values) == ("slot", {"issue": 77})
