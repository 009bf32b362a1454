"""``bir bench workload --quick`` runs end to end (``.ci/run`` runs it here) and reports every figure the
issue's goals name; ours never replays a wrong call."""

from __future__ import annotations

import json
import subprocess
import sys

from bir.benchmarks import workload_corpus as corpus
from bir.benchmarks.workload import own_turn, tokens


def test_the_quick_workload_bench_replays_the_stream_with_no_wrong_replay_and_reports_what_it_saved() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bir.cli", "bench", "workload", "--quick", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["templates"] >= 10
    one, two = report["rules"]
    assert (one["minRuns"], two["minRuns"]) == (1, 2)
    for rule in report["rules"]:
        assert rule["prompts"] == report["prompts"]
        assert rule["wrong"] == 0
        assert rule["replayed"] > 0
        assert rule["savedTokens"] > 0
        assert rule["savedUsd"] > 0
        assert rule["perReplayed"]["seconds"] > 0
        # bir's own booking counts the same replays against the recorded runs' cost.
        assert rule["booked"]["replays"] == rule["replayed"]
    assert one["ideal"] > two["ideal"]


def test_the_stream_is_reproducible_shuffled_and_holds_distractors_and_varied_values() -> None:
    first = corpus.stream(seed=19, per_template=5, per_distractor=3)
    again = corpus.stream(seed=19, per_template=5, per_distractor=3)
    assert [p.text for p in first] == [p.text for p in again]
    assert len(first) >= 50
    assert len({p.template for p in first}) >= 10
    assert [p.template for p in first[:8]] != sorted(p.template for p in first[:8])
    distractors = {t.name for t in corpus.TEMPLATES if t.distractor_of}
    assert distractors
    assert distractors <= {p.template for p in first}
    for template in corpus.TEMPLATES:
        texts = [p.text for p in first if p.template == template.name]
        assert len(set(texts)) > 1, template.name
    # A distractor needs other calls than the template it shares its words with.
    riskiest = corpus.TEMPLATES[1].calls({"region": "eu-west-1"})
    safest = next(t for t in corpus.TEMPLATES if t.name == "safest").calls({"region": "eu-west-1"})
    assert riskiest[0] == safest[0]
    assert riskiest[1] != safest[1]


def test_a_turn_the_model_does_itself_costs_a_request_per_call_and_one_for_the_answer() -> None:
    calls = corpus.TEMPLATES[1].calls({"region": "eu-west-1"})
    requests = own_turn(calls)
    assert len(requests) == len(calls) + 1
    assert requests[1]["input_tokens"] > requests[0]["input_tokens"]
    assert tokens(requests) > tokens(own_turn(calls[:1]))
