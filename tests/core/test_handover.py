from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bir.core.handover import MAX_NOTE_CHARS, OPENING, Stop, StopKind, handover_note
from bir.core.types import ScenarioStep


def _steps(n: int, reasoning: str = "do step") -> list[ScenarioStep]:
    return [
        ScenarioStep(step_index=i, tool_name=f"mcp__fleet__tool{i + 1}", reasoning=f"{reasoning} {i + 1}")
        for i in range(n)
    ]


def test_every_note_opens_with_the_hand_over_sentence() -> None:
    note = handover_note(_steps(3), Stop("not_sent", step=0, detail="no proxy for fleet"))
    assert note.startswith(
        "[BaseInstRunner calculated replay] The calculated scenario for this request stopped before finishing. "
        "Continue the task yourself from here, calling tools as needed."
    )


def test_a_note_where_nothing_ran_gives_the_whole_task_back() -> None:
    note = handover_note(_steps(3), Stop("not_sent", step=0, detail="no proxy for fleet"))
    assert "No step of the scenario ran; the whole task is yours." in note
    assert (
        "Step 1 of 3 (mcp__fleet__tool1) did not run: no proxy for fleet. Nothing of it happened; do it yourself."
        in note
    )


def test_a_call_sent_and_never_answered_may_or_may_not_have_completed() -> None:
    note = handover_note(_steps(3), Stop("no_answer", step=0, detail="no answer in 60 s"))
    assert "No step of the scenario is known to have finished; the task is yours." in note
    assert "No step of the scenario ran" not in note
    assert (
        "Step 1 of 3 (mcp__fleet__tool1) was sent but did not answer (no answer in 60 s). It may or may not have "
        "completed: check whether its work happened before you run it again." in note
    )


def test_steps_that_ran_are_split_between_the_calls_above_and_the_results_below() -> None:
    note = handover_note(_steps(5), Stop("not_sent", step=3), ran_above=1, ran_below=2)
    assert (
        "Steps 1–3 of 5 ran under the scenario: step 1 as the tool calls above, steps 2–3 in the results below. "
        "Do not repeat them." in note
    )


def test_steps_that_ran_only_as_pinned_calls_are_the_calls_above() -> None:
    note = handover_note(_steps(4), Stop("cancelled", step=2), ran_above=2)
    assert "Steps 1–2 of 4 ran under the scenario as the tool calls above. Do not repeat them." in note
    assert "Step 3 of 4 (mcp__fleet__tool3) did not run: the scenario run was cancelled before it." in note


def test_a_step_whose_output_logic_failed_must_not_be_run_again() -> None:
    note = handover_note(_steps(3), Stop("output_failed", step=1, detail="TypeError: x is undefined"), ran_below=1)
    assert "Step 1 of 3 ran under the scenario; its result is below. Do not repeat it." in note
    assert (
        "Step 2 of 3 (mcp__fleet__tool2) ran — its result is real and its side effects are in place — but the "
        "scenario could not read its output (TypeError: x is undefined), so it stops there. Do not run it again."
    ) in note


def test_a_step_the_time_budget_did_not_reach_did_not_run() -> None:
    note = handover_note(_steps(3), Stop("out_of_time", step=2), ran_below=2)
    assert "Step 3 of 3 (mcp__fleet__tool3) did not run: the scenario's time budget ran out before it." in note


def test_a_call_beside_a_pin_in_flight_names_both_steps() -> None:
    note = handover_note(_steps(4), Stop("concurrent", step=2, in_flight=1), ran_above=1)
    assert "Step 2 of 4 (mcp__fleet__tool2) was started and has not reported back." in note
    assert (
        "Step 3 of 4 (mcp__fleet__tool3) was not run by the scenario: another of its calls was still in flight, "
        "and a scenario runs one call at a time." in note
    )
    assert "Step 1 of 4 ran under the scenario as the tool call above. Do not repeat it." in note


def test_the_note_ends_with_the_steps_after_the_stop_and_the_derived_parameters() -> None:
    note = handover_note(
        _steps(4),
        Stop("input_failed", step=1, detail="ReferenceError: foo"),
        ran_above=1,
        params={"region": "eu-west-1", "apiKey": "sk-SECRET"},
        redact=lambda s: s.replace("sk-SECRET", "[REDACTED]"),
    )
    rest = note.split("The rest of the plan:\n", 1)[1]
    assert rest.startswith("3. mcp__fleet__tool3 — do step 3\n4. mcp__fleet__tool4 — do step 4\n\n")
    assert note.endswith('Parameters derived for this request:\n- region: "eu-west-1"\n- apiKey: "[REDACTED]"')
    assert "sk-SECRET" not in note
    assert "could not compute its input (ReferenceError: foo)" in note


def test_parameters_that_could_not_be_computed_hand_over_the_whole_task() -> None:
    note = handover_note(_steps(2), Stop("params_failed", detail="no value for the target region"))
    assert "No step of the scenario ran; the whole task is yours." in note
    assert "could not compute its parameters for this request (no value for the target region)" in note
    assert "1. mcp__fleet__tool1" in note


def test_long_lists_are_cut_to_fit_and_the_opening_is_kept() -> None:
    steps = _steps(200, reasoning="r" * 300)
    params = {f"p{i}": "v" * 500 for i in range(100)}
    note = handover_note(steps, Stop("not_sent", step=0, detail="d" * 10_000), params=params)
    assert len(note) <= MAX_NOTE_CHARS
    assert note.startswith(OPENING)
    assert "more steps" in note


kinds: st.SearchStrategy[StopKind] = st.sampled_from(
    [
        "not_sent",
        "no_answer",
        "tool_error",
        "input_failed",
        "output_failed",
        "params_failed",
        "out_of_time",
        "cancelled",
        "concurrent",
    ]
)


stops = st.builds(
    Stop,
    kind=kinds,
    step=st.one_of(st.none(), st.integers(-2, 40)),
    detail=st.text(max_size=3000),
    in_flight=st.one_of(st.none(), st.integers(-2, 40)),
)


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=300), st.text(max_size=600)), max_size=30),
    stops,
    st.tuples(st.integers(-3, 40), st.integers(-3, 40)),
    st.dictionaries(st.text(max_size=50), st.one_of(st.text(max_size=800), st.integers()), max_size=30),
)
def test_a_hand_over_note_never_exceeds_4000_characters_and_always_opens_the_same_way(
    raw_steps: list[tuple[str, str]], stop: Stop, ran: tuple[int, int], params: dict[str, object]
) -> None:
    steps = [ScenarioStep(step_index=i, tool_name=t, reasoning=r) for i, (t, r) in enumerate(raw_steps)]
    note = handover_note(steps, stop, ran_above=ran[0], ran_below=ran[1], params=params)
    assert len(note) <= MAX_NOTE_CHARS
    assert note.startswith(OPENING)
