"""The matching cascade (issue 18 item 4), cheapest first, over the ready scenarios of one project (or
of every project, ``BIR_LOCAL_MATCH_SCOPE=user``):

1. **exact**: the same prompt (case, spacing and sentence punctuation aside);
2. **slot**: the prompt differs from a recorded one only inside its parameter spans (``slots.align``);
   the new spans are the new values;
3. **embedding**: a paraphrase. Each slot's value is found in the new prompt by the shape of its recorded
   value; the words outside the slots must then be the same words (stems, verbs by their action class —
   "list" and "show" agree, "list" and "close" never), and the cosine of the two masked prompts'
   all-MiniLM-L6-v2 vectors must reach ``BIR_LOCAL_EMBED_MIN_SIMILARITY``. The model is only asked when
   some candidate passes the words' gate, so a prompt that matches nothing costs no embedding.

The index lives in memory, refreshed from the store's change counter, so a scenario another control
server calculated is a candidate at this one's next prompt. Every lookup narrows candidates by a word
each template must contain (its rarest), so a match costs a few alignments whatever the store holds.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bir.hooks.local import slots
from bir.hooks.local import words as lexicon

Rule = Literal["exact", "slot", "embedding", "model"]
MAX_EMBED_CANDIDATES: Final = 3
MAX_EXPLAINED: Final = 5
MAX_EXPLAIN_SCAN: Final = 2_000


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready scenario as the index holds it: small, its template tokenized only when it is aligned."""

    scenario_id: str
    run_id: str | None
    project: str
    created_at: float
    normalized: str
    raw_template: Mapping[str, Any]
    samples: Mapping[str, Any]
    literal: frozenset[str]
    content: frozenset[str]
    masked_text: str
    slot_count: int
    vector: Any | None = None  # the masked template's embedding (numpy float32), when computed

    @property
    def template(self) -> slots.Template:
        return slots.Template.of(self.raw_template, self.samples)


@dataclass(frozen=True)
class Considered:
    """A candidate the cascade looked at, and what it made of it (for ``bir scenario match``)."""

    scenario_id: str
    rule: str
    score: float | None
    why: str

    def wire(self) -> dict[str, Any]:
        return {"scenarioId": self.scenario_id, "rule": self.rule, "score": self.score, "why": self.why}


@dataclass(frozen=True)
class Hit:
    rule: Rule
    scenario_id: str
    run_id: str | None
    values: dict[str, Any]
    similarity: float
    considered: tuple[Considered, ...] = ()


@dataclass(frozen=True)
class Miss:
    considered: tuple[Considered, ...] = ()
    embedding: str = "not needed"


def candidate_of(
    scenario_id: str,
    *,
    run_id: str | None,
    project: str,
    created_at: float,
    template: Mapping[str, Any],
    samples: Mapping[str, Any],
    vector: Any | None = None,
) -> Candidate:
    tpl = slots.Template.of(template, samples)
    spans = slots.template_spans(tpl)
    outside = slots.masked(tpl.text, [(s, e, " ") for s, e, _ in spans])
    return Candidate(
        scenario_id=scenario_id,
        run_id=run_id,
        project=sys.intern(project),
        created_at=created_at,
        normalized=slots.normalized(tpl.text),
        raw_template={"text": tpl.text, "slots": list(template.get("slots") or [])},
        samples=dict(samples),
        literal=frozenset(sys.intern(w) for w in tpl.literal_words()),
        content=frozenset(sys.intern(w) for w in lexicon.content_words(outside)),
        masked_text=slots.masked(tpl.text, spans),
        slot_count=len(tpl.slots),
        vector=vector,
    )


@dataclass
class MatchIndex:
    """The ready scenarios, indexed for the cascade."""

    by_id: dict[str, Candidate] = field(default_factory=dict)
    _exact: dict[str, set[str]] = field(default_factory=dict)
    _by_literal: dict[str, set[str]] = field(default_factory=dict)
    _by_content: dict[str, set[str]] = field(default_factory=dict)
    _unkeyed: set[str] = field(default_factory=set)
    _df: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_id)

    def put(self, candidate: Candidate) -> None:
        self.remove(candidate.scenario_id)
        self.by_id[candidate.scenario_id] = candidate
        self._exact.setdefault(candidate.normalized, set()).add(candidate.scenario_id)
        for word in candidate.literal:
            self._df[word] = self._df.get(word, 0) + 1
        key = min(candidate.literal, key=lambda w: (self._df.get(w, 0), w)) if candidate.literal else None
        if key is None:
            self._unkeyed.add(candidate.scenario_id)
        else:
            self._by_literal.setdefault(key, set()).add(candidate.scenario_id)
        if candidate.content:
            ckey = min(candidate.content, key=lambda w: (self._df.get(w, 0), w))
            self._by_content.setdefault(ckey, set()).add(candidate.scenario_id)

    def remove(self, scenario_id: str) -> None:
        old = self.by_id.pop(scenario_id, None)
        if old is None:
            return
        for table in (self._exact, self._by_literal, self._by_content):
            for bucket in table.values():
                bucket.discard(scenario_id)
        self._unkeyed.discard(scenario_id)
        for word in old.literal:
            self._df[word] = max(0, self._df.get(word, 0) - 1)

    def set_vector(self, scenario_id: str, vector: Any) -> None:
        old = self.by_id.get(scenario_id)
        if old is not None:
            self.by_id[scenario_id] = dataclasses.replace(old, vector=vector)

    def _in_scope(self, ids: Iterable[str], project: str | None) -> list[Candidate]:
        found = [self.by_id[i] for i in ids if i in self.by_id]
        if project is not None:
            found = [c for c in found if c.project == project]
        # Newest first: of two equal templates, the later recording is the better one.
        return sorted(found, key=lambda c: -c.created_at)

    # --- the cascade ------------------------------------------------------------------------------

    def match(
        self,
        prompt: str,
        *,
        project: str | None,
        embed: Callable[[str], Any | None] | None,
        min_similarity: float,
        explain: bool = False,
    ) -> Hit | Miss:
        """The best match for ``prompt``; ``embed`` (None: no model) is asked only when a paraphrase is possible.

        ``explain`` looks at every candidate in scope (up to ``MAX_EXPLAIN_SCAN``, newest first), not only
        those sharing the prompt's words, so a miss can say why the nearest ones did not match."""
        considered: list[Considered] = []
        norm = slots.normalized(prompt)
        for cand in self._in_scope(self._exact.get(norm, ()), project):
            values = {str(s["param"]): cand.samples.get(str(s["param"])) for s in cand.raw_template["slots"]}
            return Hit("exact", cand.scenario_id, cand.run_id, values, 1.0)
        tokens = {t.folded for t in slots.tokenize(prompt)}
        pool: set[str] = set(self._unkeyed)
        for token in tokens:
            pool |= self._by_literal.get(token, set())
        if explain:
            pool = set(list(self.by_id)[-MAX_EXPLAIN_SCAN:])
        aligned: list[tuple[Candidate, dict[str, Any]]] = []
        for cand in self._in_scope(pool, project):
            if not cand.literal <= tokens:
                lacking = ", ".join(sorted(cand.literal - tokens)[:4])
                considered.append(
                    Considered(cand.scenario_id, "slot", None, f"the prompt lacks words it has: {lacking}")
                )
                continue
            result = slots.align(cand.template, prompt)
            if isinstance(result, slots.Aligned):
                aligned.append((cand, result.values))
            else:
                considered.append(Considered(cand.scenario_id, "slot", None, result.why))
        if aligned:
            cand, values = min(aligned, key=lambda a: (a[0].slot_count, -a[0].created_at))
            return Hit("slot", cand.scenario_id, cand.run_id, values, 1.0, tuple(considered[:MAX_EXPLAINED]))
        return self._paraphrase(prompt, project, embed, min_similarity, considered)

    def _paraphrase(
        self,
        prompt: str,
        project: str | None,
        embed: Callable[[str], Any | None] | None,
        min_similarity: float,
        considered: list[Considered],
    ) -> Hit | Miss:
        content_all = set(lexicon.content_words(prompt))
        pool: set[str] = set()
        for word in content_all:
            pool |= self._by_content.get(word, set())
        gated: list[tuple[Candidate, dict[str, Any], str]] = []
        for cand in self._in_scope(pool, project):
            if not cand.content <= content_all:
                continue
            tpl = cand.template
            values = slots.values_by_shape(tpl, prompt)
            if isinstance(values, slots.Refused):
                considered.append(Considered(cand.scenario_id, "embedding", None, values.why))
                continue
            spans = slots.value_spans(tpl, prompt, values)
            outside = slots.masked(prompt, [(s, e, " ") for s, e, _ in spans])
            words_new = set(lexicon.content_words(outside))
            if words_new != set(cand.content):
                extra = sorted(words_new - cand.content)
                why = "the words outside the values differ" + (f" ({', '.join(extra[:4])})" if extra else "")
                considered.append(Considered(cand.scenario_id, "embedding", None, why))
                continue
            gated.append((cand, values, slots.masked(prompt, spans)))
        if not gated:
            return Miss(tuple(considered[:MAX_EXPLAINED]))
        if embed is None:
            return Miss(tuple(considered[:MAX_EXPLAINED]), embedding="the model is not loaded")
        best: tuple[float, Candidate, dict[str, Any]] | None = None
        vectors: dict[str, Any] = {}
        for cand, values, masked_new in gated[:MAX_EMBED_CANDIDATES]:
            if cand.vector is None:
                considered.append(Considered(cand.scenario_id, "embedding", None, "its template is not embedded yet"))
                continue
            vector = vectors.get(masked_new)
            if vector is None:
                vector = embed(masked_new)
                if vector is None:
                    return Miss(tuple(considered[:MAX_EXPLAINED]), embedding="the model is not loaded")
                vectors[masked_new] = vector
            score = float(vector @ cand.vector)
            if score < min_similarity:
                considered.append(
                    Considered(cand.scenario_id, "embedding", round(score, 4), f"similarity below {min_similarity}")
                )
                continue
            if best is None or score > best[0]:
                best = (score, cand, values)
        if best is None:
            return Miss(tuple(considered[:MAX_EXPLAINED]), embedding="asked")
        score, cand, values = best
        return Hit(
            "embedding", cand.scenario_id, cand.run_id, values, round(score, 4), tuple(considered[:MAX_EXPLAINED])
        )


def samples_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """A serialized scenario's parameter samples."""
    specs = body.get("paramsObject") or {}
    return {name: spec.get("sampleValue") for name, spec in specs.items() if isinstance(spec, dict)}


def masked_template(template: Mapping[str, Any], samples: Mapping[str, Any]) -> str:
    tpl = slots.Template.of(template, samples)
    return slots.masked(tpl.text, slots.template_spans(tpl))


def derive_values(template: Mapping[str, Any], samples: Mapping[str, Any], prompt: str) -> dict[str, Any] | None:
    """The slot values of ``prompt`` for one scenario (alignment, else the values' shapes); None when neither."""
    tpl = slots.Template.of(template, samples)
    aligned = slots.align(tpl, prompt)
    if isinstance(aligned, slots.Aligned):
        return aligned.values
    shaped = slots.values_by_shape(tpl, prompt)
    return None if isinstance(shaped, slots.Refused) else shaped


def names(seq: Sequence[Considered]) -> list[str]:
    return [c.scenario_id for c in seq]
