from bir.core.transcript import ModelUsage, UsageMark
from bir.core.types import Matched
from bir.hooks.session.booking import book, draft
from bir.hooks.session.state import Run

USAGE = [ModelUsage("claude-sonnet-4-5", input_tokens=1000, output_tokens=100)]


def run(*, mark: bool = True, recording: bool = False, matched: Matched | None = None) -> Run:
    return Run(
        run_id="run_1",
        session_id="s",
        prompt="the prompt",
        started=10.0,
        mark=UsageMark(path="/t.jsonl") if mark else None,
        transcript_path="/t.jsonl",
        permission_mode="default",
        recording=recording,
        matched=matched,
        last_answer="the answer",
    )


def hit(similarity: float = 0.95) -> Matched:
    return Matched(run_id="run_src", similarity=similarity, scenario_id="scn_1", execution_ticket="tkt_1")


def test_a_missed_turn_books_its_finish_with_its_cost_and_no_report() -> None:
    booking = book(run(recording=True), USAGE, sealed_at=12.5)
    assert booking.report is None
    assert booking.finish is not None
    assert booking.finish.output == "the answer"
    assert booking.finish.duration_ms == 2500
    assert booking.finish.cost_usd > 0
    assert booking.finish.measured is True


def test_a_declined_match_books_not_steered_with_the_turns_cost() -> None:
    booking = book(run(matched=hit()), USAGE, sealed_at=11.0)
    assert booking.finish is None
    report = booking.report
    assert report is not None
    assert report.decision.outcome == "not_steered"
    assert report.body is not None
    assert report.body["ticket"] == "tkt_1"
    assert report.body["sessionCostUsd"] == report.session_cost_usd > 0


def test_without_a_mark_the_cost_is_not_a_measurement() -> None:
    report = book(run(mark=False, matched=hit()), [], sealed_at=11.0).report
    assert report is not None
    assert report.decision.measured is False


def test_a_costless_errorless_decline_has_nothing_to_send_but_its_draft_claims_the_ticket() -> None:
    report = book(run(matched=hit()), [], sealed_at=11.0).report
    assert report is not None
    assert report.body is None
    assert draft(run(matched=hit()), "tkt_1", armed=False) == {"ticket": "tkt_1", "outcome": "not_steered"}


def test_a_matched_turns_report_carries_the_turns_usage_so_the_tokens_it_saved_can_be_counted() -> None:
    report = book(run(matched=hit()), USAGE, sealed_at=11.0).report
    assert report is not None
    assert report.body is not None
    assert report.body["usage"] == [
        {
            "model": "claude-sonnet-4-5",
            "inputTokens": 1000,
            "outputTokens": 100,
            "cacheCreationInputTokens": 0,
            "cacheReadInputTokens": 0,
        }
    ]
