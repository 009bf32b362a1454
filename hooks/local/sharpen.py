"""A second run sharpens a scenario (issue 19 items 2 and 3): anti-unification by generate-and-test.

One recording is a thin basis: a value that is both "the first row" and "the riskiest row", a constant
that is really a parameter the user never varied, a step that was exploration. When a finished run
repeats a task a scenario already holds (its prompt aligns with the scenario's template, or differs from
it only in a few value-like words, never in a word that names an action), the runs are calculated
together:

- **what differs is a parameter**: the prompt's spans that differ between the runs seed parameters, so a
  value the calls hold is traced to them however the tokens fall (``acme/web`` → ``acme`` and ``web``;
  ``eu-west`` in the prompt, ``eu-west-1`` in the call: a template around the parameter);
- **what agrees is a constant**, and a value that differs where nothing explains it fails the check;
- **a row rule must hold in both**: where one recording leaves a list crossing ambiguous (the chosen row
  is both the first and the riskiest), every rule that fits is tried, and only those whose scenario
  reproduces *every* run stay; one left, the ambiguity is resolved; several, the runs agree but the
  scenario stays not ready, saying which rules still fit; none, the run does not join;
- **exploration**: a step only some runs made is left out, and the check shows whether anything needed it.

The check is the self-check's dry replay in the sandbox, run once per run of the group: the newest run
is the base (its prompt the template, its outputs the samples), every other run's values come from
aligning its prompt with that template, and each must get exactly its own recorded inputs back. So a
scenario made ready here reproduces every run it rests on; how many that is (its ``support``) is kept
with it, and ``BIR_LOCAL_MIN_RUNS`` says how many it needs before the matcher replays it.

A change to a scenario's calculation made this way is an edit of kind ``calculation`` in its history
(``bir scenario edits``), never silent. A scenario with hand edits standing is not recalculated: a run
joins it only if its current body reproduces that run.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from anyio import to_thread

from bir.core.errors import LogicError
from bir.core.log import log_event
from bir.hooks.local import selfcheck, slots
from bir.hooks.local import words as lexicon
from bir.hooks.local.calculate import CALC_VERSION, Draft, draft_scenario, recorded_steps, sort_steps, template_of
from bir.hooks.local.match import masked_template, samples_of
from bir.hooks.local.store import ScenarioRow
from bir.hooks.local.trace import Recorded

if TYPE_CHECKING:
    from bir.hooks.local.ports import Service as LocalService

# Drafts one group may try (each a rule choice at an ambiguous crossing) before it gives up.
MAX_DRAFTS: Final = 12
# Runs one scenario is calculated from: the newest ones (older runs have said what they can). The
# ceiling of BIR_LOCAL_MIN_RUNS is this, so any support it asks for can be reached.
MAX_GROUP: Final = 8
# A prompt may differ from a template in at most this many places, each this many tokens at most.
MAX_REGIONS: Final = 3
MAX_REGION_TOKENS: Final = 4
# The share of tokens two prompts of one task have in common, at least.
MIN_SHARED: Final = 0.6


@dataclass(frozen=True)
class RunView:
    """One finished run as the calculation reads it."""

    id: str
    prompt: str
    steps: tuple[Recorded, ...]
    created_at: float

    def kept(self) -> list[Recorded]:
        return sort_steps(self.prompt, self.steps)[0]


@dataclass(frozen=True)
class Settled:
    """What a finished run came to: the scenario it rests in (None: the run vanished), and whether it
    joined a scenario other runs made."""

    scenario: ScenarioRow | None
    joined: bool = False


@dataclass(frozen=True)
class GroupResult:
    """A group's calculation: ``draft`` and ``verdict`` of the scenario every run agrees with (``ready``),
    or why not; ``agree`` is true when the runs agree but a choice stays open (the scenario is then kept
    not ready, with every run)."""

    ready: bool
    agree: bool
    draft: Draft | None
    verdict: selfcheck.Verdict | None
    reason: dict[str, Any] | None


# --- the prompts: one task or not, and where they differ ---------------------------------------------


def _regions(a: Sequence[slots.Token], b: Sequence[slots.Token]) -> tuple[list[tuple[str, int, int, int, int]], int]:
    opcodes = difflib.SequenceMatcher(None, [t.folded for t in a], [t.folded for t in b], autojunk=False)
    codes = opcodes.get_opcodes()
    shared = sum(i2 - i1 for tag, i1, i2, _j1, _j2 in codes if tag == "equal")
    return [c for c in codes if c[0] != "equal"], shared


def _values(old: Sequence[slots.Token], new: Sequence[slots.Token]) -> bool:
    """Whether one value may have replaced another here: no word that names an action on either side, and
    not filler for filler ("the" for "a")."""
    if any(lexicon.is_action_word(t.text) for t in (*old, *new)):
        return False
    return any(t.folded not in lexicon.STOPWORDS for t in (*old, *new))


def same_task(template: Mapping[str, Any], prompt: str) -> int | None:
    """How many tokens ``prompt`` shares with ``template`` when it may be another run of its task (None:
    it is not): it aligns with the template's slots, or differs from its text only by replacing a few
    value-like words — never in a word that names an action, never by adding or dropping words."""
    tpl = slots.Template.of(template, template.get("samples") or {})
    new = slots.tokenize(prompt)
    regions, shared = _regions(tpl.tokens, new)
    if not tpl.tokens or shared < MIN_SHARED * max(len(tpl.tokens), len(new)):
        return None
    if isinstance(slots.align(tpl, prompt), slots.Aligned):
        return shared
    if len(regions) > MAX_REGIONS:
        return None
    for tag, i1, i2, j1, j2 in regions:
        if tag != "replace" or i2 - i1 > MAX_REGION_TOKENS or j2 - j1 > MAX_REGION_TOKENS:
            return None
        if not _values(tpl.tokens[i1:i2], new[j1:j2]):
            return None
    return shared


def prompt_seeds(base: str, others: Sequence[str]) -> list[tuple[int, int]]:
    """The spans of ``base`` that hold another value in some other prompt of the task."""
    tokens = slots.tokenize(base)
    spans: set[tuple[int, int]] = set()
    for other in others:
        regions, _shared = _regions(tokens, slots.tokenize(other))
        for _tag, i1, i2, _j1, _j2 in regions:
            if i1 < i2:
                spans.add((tokens[i1].start, tokens[i2 - 1].end))
    return sorted(spans)


# --- the steps: which call of one run is which call of another --------------------------------------


def step_mapping(base: Sequence[Recorded], other: Sequence[Recorded]) -> dict[int, Recorded]:
    """Each base step's counterpart in ``other`` (by source index), along the longest common run of tool
    names; a step with none is exploration in one of the two."""
    matcher = difflib.SequenceMatcher(None, [s.tool for s in base], [s.tool for s in other], autojunk=False)
    found: dict[int, Recorded] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            found[base[block.a + k].index] = other[block.b + k]
    return found


def exploration(base: RunView, others: Sequence[RunView]) -> dict[int, str]:
    """The base's kept steps that some other run of the task did not make, with why they are left out."""
    kept = base.kept()
    drop: dict[int, str] = {}
    for other in others:
        mapped = step_mapping(kept, other.kept())
        for step in kept:
            if step.index not in mapped and step.index not in drop:
                drop[step.index] = f"another run of this task ({other.id}) did without it (exploration)"
    return drop


# --- the group ------------------------------------------------------------------------------------


def _fingerprint(verdict: selfcheck.Verdict) -> str:
    steps = [(s.get("toolName"), s.get("toolInputLogic"), s.get("toolOutputLogic")) for s in verdict.scenario["steps"]]
    return json.dumps([steps, sorted(verdict.scenario.get("paramsObject") or {})], sort_keys=True)


async def _agrees(
    pool: Any, verdict: selfcheck.Verdict, draft: Draft, base: RunView, other: RunView
) -> dict[str, Any] | None:
    """None when ``verdict``'s scenario, given ``other``'s prompt values and outputs, rebuilds ``other``'s
    inputs exactly; else why not."""
    template = {**template_of(base.prompt, draft.params), "samples": draft.params_sample()}
    aligned = slots.align(slots.Template.of(template, draft.params_sample()), other.prompt)
    if isinstance(aligned, slots.Refused):
        return {"runId": other.id, "message": f"run {other.id} did not agree: its prompt: {aligned.why}"}
    mapped = step_mapping(base.kept(), other.kept())
    outputs: list[str | None] = []
    recorded: list[Any] = []
    for step in draft.steps:
        twin = mapped.get(step.source_index)
        if twin is None:
            return {
                "runId": other.id,
                "message": f"run {other.id} did not agree: it made no call like step {step.step_index} "
                f"({step.tool_name})",
            }
        outputs.append(twin.output)
        recorded.append(twin.input)
    run = await selfcheck.dry_run(pool, verdict.scenario, aligned.values, outputs)
    found = selfcheck.mismatch(recorded, run, [s.tool_name for s in draft.steps])
    if found is None:
        return None
    return {**found, "runId": other.id, "message": f"run {other.id} did not agree: {found.get('message')}"}


async def calculate_group(pool: Any, scenario_id: str, base: RunView, others: Sequence[RunView]) -> GroupResult:
    """The scenario every run of the group agrees with, calculated from ``base`` with what ``others`` show.

    Raises:
        LogicError: the sandbox could not run a check at all.
    """
    seeds = prompt_seeds(base.prompt, [o.prompt for o in others])
    drop = exploration(base, others)
    queue: list[dict[str, Any]] = [{}]
    seen: set[str] = set()
    passing: dict[str, tuple[Draft, selfcheck.Verdict]] = {}
    first_failure: dict[str, Any] | None = None
    tried = 0
    while queue and tried < MAX_DRAFTS:
        choices = queue.pop(0)
        tried += 1
        draft = await to_thread.run_sync(
            lambda c=choices: draft_scenario(base.prompt, base.steps, seeds=seeds, choices=c, drop=drop)  # type: ignore[misc]
        )
        open_ones = [(k, rules) for k, rules in draft.ambiguous if k not in choices]
        if not draft.traced and open_ones:
            key, rules = open_ones[0]
            for rule in rules:
                branch = {**choices, key: rule}
                name = json.dumps(sorted((k, str(v)) for k, v in branch.items()))
                if name not in seen:
                    seen.add(name)
                    queue.append(branch)
            continue
        verdict = await selfcheck.check(pool, scenario_id, draft)
        if verdict.state != "ready":
            first_failure = first_failure or verdict.reason
            continue
        problem = None
        for other in others:
            problem = await _agrees(pool, verdict, draft, base, other)
            if problem is not None:
                break
        if problem is not None:
            first_failure = first_failure or problem
            continue
        passing.setdefault(_fingerprint(verdict), (draft, verdict))
    if len(passing) == 1:
        draft, verdict = next(iter(passing.values()))
        return GroupResult(True, True, draft, verdict, None)
    if passing:
        draft, verdict = next(iter(passing.values()))
        message = (
            f"selector ambiguity: {len(passing)} ways of choosing rows reproduce all {len(others) + 1} runs of this "
            "task; a run where they pick different rows would tell which was meant"
        )
        return GroupResult(False, True, draft, verdict, {"message": message})
    return GroupResult(False, False, None, None, first_failure or {"message": "no calculation fits every run"})


# --- the store side -------------------------------------------------------------------------------


def _view(service: LocalService, run_id: str) -> RunView | None:
    run = service.store.run(run_id)
    if run is None or run.finish is None:
        return None
    steps = recorded_steps([s.body for s in service.store.steps(run_id)])
    return RunView(run.id, run.input, tuple(steps), run.created_at)


def find_sibling(service: LocalService, view: RunView, project: str) -> str | None:
    """The scenario whose task ``view`` repeats (the one sharing the most prompt tokens), or None."""
    words = {t.folded for t in slots.tokenize(view.prompt)}
    best: tuple[int, str] | None = None
    for scenario_id, run_id, _state, template in service.store.scenario_heads(project):
        if run_id == view.id or not isinstance(template, dict) or not isinstance(template.get("text"), str):
            continue
        theirs = {t.folded for t in slots.tokenize(template["text"])}
        if len(words & theirs) < MIN_SHARED * max(len(words), len(theirs), 1):
            continue
        shared = same_task(template, view.prompt)
        if shared is not None and (best is None or shared > best[0]):
            best = (shared, scenario_id)
    return None if best is None else best[1]


def _summary(body: Mapping[str, Any], state: str) -> dict[str, Any]:
    return {
        "state": state,
        "steps": [s.get("toolName") for s in body.get("steps") or []],
        "params": sorted(body.get("paramsObject") or {}),
        "bodies": [(s.get("toolInputLogic"), s.get("toolOutputLogic")) for s in body.get("steps") or []],
        "support": (body.get("support") or {}).get("runs", 1),
    }


async def settle_run(service: LocalService, run_id: str, *, repairs: str | None = None) -> Settled:
    """Calculate a finished run: into the scenario of the task it repeats, with that scenario's runs, or
    alone. ``repairs`` names the scenario a replayed turn that handed over repaired (issue 19 item 3):
    the run then joins that scenario as its newest, better version."""
    view = await to_thread.run_sync(lambda: _view(service, run_id))
    if view is None:
        return Settled(None)
    run = await to_thread.run_sync(lambda: service.store.run(run_id))
    project = run.project if run is not None else service.project or ""
    sibling = repairs or await to_thread.run_sync(lambda: find_sibling(service, view, project))
    if sibling is not None:
        joined = await _join(service, sibling, view, repair=repairs is not None)
        if joined is not None:
            return Settled(joined, joined=True)
    if repairs is not None:
        return await _replace(service, repairs, view)
    return Settled(await service.calculate_run(run_id))


async def _members(service: LocalService, scenario: ScenarioRow, view: RunView) -> list[RunView]:
    ids = [
        rid
        for rid, role in await to_thread.run_sync(lambda: service.store.runs_of(scenario.id))
        if role != "superseded"
    ]
    if scenario.run_id is not None and scenario.run_id not in ids:
        ids.append(scenario.run_id)
    views = []
    for rid in ids[-(MAX_GROUP - 1) :]:
        if rid == view.id:
            continue
        found = await to_thread.run_sync(lambda rid=rid: _view(service, rid))  # type: ignore[misc]
        if found is not None:
            views.append(found)
    return views


async def _join(service: LocalService, scenario_id: str, view: RunView, *, repair: bool) -> ScenarioRow | None:
    """``view`` calculated with the runs of ``scenario_id``; the scenario as it is after, or None when the run
    did not join it."""
    scenario = await to_thread.run_sync(lambda: service.store.scenario(scenario_id))
    if scenario is None:
        return None
    members = await _members(service, scenario, view)
    if not members:
        return None
    pool = await service.pool()
    if await to_thread.run_sync(lambda: service.has_hand_edits(scenario_id)):
        return await _join_as_is(service, scenario, view, members, pool)
    try:
        result = await calculate_group(pool, scenario_id, view, members)
    except LogicError as exc:
        log_event("local.sharpen_failed", scenario_id=scenario_id, run_id=view.id, error=str(exc)[:300])
        return None
    if not result.agree:
        log_event(
            "local.sharpen_refused",
            scenario_id=scenario_id,
            run_id=view.id,
            repair=repair,
            reason=str((result.reason or {}).get("message"))[:300],
        )
        return None
    assert result.draft is not None
    assert result.verdict is not None
    group = [view, *members]
    why = "repair after divergence" if repair else "another run of the task"
    return await _store_group(service, scenario, result, group, why)


async def _join_as_is(
    service: LocalService, scenario: ScenarioRow, view: RunView, members: Sequence[RunView], pool: Any
) -> ScenarioRow | None:
    """A scenario with hand edits keeps its body; the run joins only if that body reproduces it."""
    source = next((m for m in members if m.id == scenario.run_id), None)
    if source is None or scenario.state != "ready":
        return None
    draft = await to_thread.run_sync(lambda: draft_scenario(source.prompt, source.steps))
    verdict = selfcheck.Verdict(scenario.state, scenario.reason, dict(scenario.body))
    if await _agrees(pool, verdict, draft, source, view) is not None:
        return None
    earlier = await to_thread.run_sync(lambda: service.store.runs_of(scenario.id))
    runs = {rid: role for rid, role in earlier}
    runs.update({view.id: "agrees", source.id: "source"})
    support = sum(1 for role in runs.values() if role in ("source", "agrees"))
    row = await _put(
        service,
        scenario,
        dict(scenario.body),
        state=scenario.state,
        reason=scenario.reason,
        base=source,
        support=support,
    )
    await to_thread.run_sync(lambda: service.store.set_runs(scenario.id, runs))
    return row


async def _store_group(
    service: LocalService,
    scenario: ScenarioRow,
    result: GroupResult,
    group: Sequence[RunView],
    why: str,
    *,
    superseded: Sequence[str] = (),
) -> ScenarioRow:
    assert result.verdict is not None
    assert result.draft is not None
    base = group[0]
    state = "ready" if result.ready else "not_ready"
    reason = None if result.ready else result.reason
    body = {**result.verdict.scenario, "id": scenario.id, "state": state, "reason": reason}
    before = _summary(scenario.body, scenario.state)
    # Runs outside this calculation stay with the scenario (so none is calculated again): an older one that
    # agreed with an earlier calculation, a superseded one that supports nothing now.
    earlier = await to_thread.run_sync(lambda: service.store.runs_of(scenario.id))
    runs = {rid: ("superseded" if role == "superseded" else "earlier") for rid, role in earlier}
    runs.update({rid: "superseded" for rid in superseded})
    runs.update({m.id: "agrees" for m in group[1:]})
    runs[base.id] = "source"
    row = await _put(
        service, scenario, body, state=state, reason=reason, base=base, support=len(group), draft=result.draft
    )
    # After the scenario is written: the runs it rests on refer to its row.
    await to_thread.run_sync(lambda: service.store.set_runs(scenario.id, runs))
    after = _summary(row.body, row.state)
    if before != after:
        changes = sorted(k for k in after if before.get(k) != after.get(k))
        note = f"recalculated from {len(group)} runs ({why}): " + ", ".join(m.id for m in group)
        entry = {
            "kind": "calculation",
            "stepIndex": None,
            "changes": changes,
            "note": note[:500],
            "forced": False,
            "undone": False,
            "chainRevision": row.chain_revision,
            "runs": [m.id for m in group],
            "why": why,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        await to_thread.run_sync(
            lambda: service.store.add_edit(
                scenario.id, kind="calculation", step_index=None, entry=entry, before=before, after=after
            )
        )
    log_event(
        "local.sharpened",
        scenario_id=scenario.id,
        run_id=base.id,
        runs=len(group),
        state=state,
        why=why,
        reason=None if reason is None else str(reason.get("message"))[:300],
    )
    return row


async def _put(
    service: LocalService,
    scenario: ScenarioRow,
    body: dict[str, Any],
    *,
    state: str,
    reason: Mapping[str, Any] | None,
    base: RunView,
    support: int,
    draft: Draft | None = None,
) -> ScenarioRow:
    body["support"] = {"runs": support}
    if draft is not None:
        template = {**template_of(base.prompt, draft.params), "samples": draft.params_sample()}
    else:
        template = dict(scenario.template or {})
    template["support"] = support
    vector = scenario.embedding if draft is None else None
    if draft is not None and state == "ready" and service.embedder.ready:
        text = masked_template(template, samples_of(body))
        embedded = await to_thread.run_sync(lambda: service.embedder.embed(text))
        vector = None if embedded is None else embedded.tobytes()
    return await to_thread.run_sync(
        lambda: service.store.put_scenario(
            scenario.id,
            project=scenario.project,
            run_id=base.id if draft is not None else scenario.run_id,
            state=state,
            reason=reason,
            body=body,
            template=template,
            normalized=slots.normalized(str(template.get("text", ""))),
            embedding=vector,
            calc_version=CALC_VERSION,
            bump_revision=True,
            now=service.clock(),
        )
    )


async def _replace(service: LocalService, scenario_id: str, view: RunView) -> Settled:
    """A repaired turn that no calculation shares with the old runs: the task is done another way now. Its
    own scenario takes the old one's place when it is ready; otherwise the old one stays as it is."""
    scenario = await to_thread.run_sync(lambda: service.store.scenario(scenario_id))
    if scenario is None or await to_thread.run_sync(lambda: service.has_hand_edits(scenario_id)):
        return Settled(await service.calculate_run(view.id))
    pool = await service.pool()
    try:
        result = await calculate_group(pool, scenario_id, view, [])
    except LogicError:
        return Settled(scenario)
    if not result.ready:
        log_event("local.repair_refused", scenario_id=scenario_id, run_id=view.id, reason=str(result.reason)[:300])
        await to_thread.run_sync(lambda: service.store.delete_run(view.id))
        return Settled(scenario)
    old = [rid for rid, _role in await to_thread.run_sync(lambda: service.store.runs_of(scenario_id))]
    row = await _store_group(service, scenario, result, [view], "repair after divergence", superseded=old)
    return Settled(row, joined=True)


async def join_if_agrees(service: LocalService, scenario_id: str, run_id: str) -> ScenarioRow | None:
    """``run_id`` joins ``scenario_id`` when a calculation reproduces it with the scenario's runs; None when
    it does not (nothing is changed then)."""
    view = await to_thread.run_sync(lambda: _view(service, run_id))
    if view is None:
        return None
    return await _join(service, scenario_id, view, repair=False)


async def recalculate(service: LocalService, scenario_id: str) -> ScenarioRow | None:
    """Calculate a scenario again from every run it rests on (``bir scenario calc --force``); None when it
    rests on one run only (then the caller recalculates that run)."""
    scenario = await to_thread.run_sync(lambda: service.store.scenario(scenario_id))
    if scenario is None:
        return None
    roles = await to_thread.run_sync(lambda: service.store.runs_of(scenario_id))
    ids = [rid for rid, role in roles if role != "superseded"][-MAX_GROUP:]
    views = [v for v in [await to_thread.run_sync(lambda rid=rid: _view(service, rid)) for rid in ids] if v]  # type: ignore[misc]
    if len(views) < 2:
        return None
    base, others = views[-1], views[:-1]
    result = await calculate_group(await service.pool(), scenario_id, base, others)
    if not result.agree:
        return None
    return await _store_group(service, scenario, result, [base, *reversed(others)], "recalculated on request")
