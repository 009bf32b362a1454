"""Where each argument of a recorded run came from (issue 18 item 3): pure, no I/O.

For each leaf of each kept step's input, in step order:

1. **the prompt**: a string of at least three characters found in the prompt between word boundaries
   (case-folded; a case change becomes ``toLowerCase``/``toUpperCase``), or a number written in the prompt,
   is a parameter; a word that names an action (``list``, ``close``) never is;
2. **an earlier output**: a value equal to a leaf of an earlier step's output (the latest producer that
   explains it wins). Every list the leaf's path crosses needs a rule the recording supports — the only
   row, the first, the last, or the unique row with the highest/lowest value of a numeric field — and
   when more than one rule fits, the prompt's wording decides ("riskiest" → the highest ``risk``) or
   the step cannot be calculated ("selector ambiguity"). A value found in several rows of one output
   is a category (``"online"``), not a pick, and is not threaded from there;
3. **a template** around such values: a string that contains prompt words or earlier-output values of
   at least six characters (``"git show --stat " + respParams.s0_hash``);
4. else **a constant**.

A value found only in the output of a step that was left out (failed, model-written) means the step
cannot be calculated; so does an input the recorder redacted or capped.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bir.core.tool_output import call_result
from bir.hooks.local import words as lexicon

MIN_PROMPT_VALUE_CHARS: Final = 3
MIN_TEMPLATE_OUTPUT_CHARS: Final = 6
MIN_TRACED_NUMBER_CHARS: Final = 3
# Bounds on the work one output costs: a larger one is walked only this far.
MAX_LEAVES_PER_OUTPUT: Final = 20_000
MAX_DEPTH: Final = 48
MAX_LINES: Final = 2_000
MAX_WORDS: Final = 32
REDACTED: Final = "[REDACTED]"
_JOINERS: Final = "-./:@"
GENERIC_KEYS: Final = frozenset({"command", "cmd", "query", "q", "text", "input", "value", "args", "content", "body"})

Case = Literal["same", "lower", "upper"]
Rule = str | tuple[str, str]  # "only" | "first" | "last" | ("max", field) | ("min", field)


class Untraceable(Exception):
    """An argument whose origin the recording cannot show; the message says why."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


# --- the recorded run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One recorded step, as the calculator reads it."""

    index: int
    tool: str
    input: Any
    output: str
    error: str | None = None


def is_mcp(tool: str) -> bool:
    return tool.startswith("mcp__")


def parse_output(tool: str, text: str) -> Any:
    """A recorded output as a value: its JSON when it is JSON, else the text. An MCP output reads as its
    canonical ``CallToolResult`` (``core.tool_output.call_result``) whatever it was recorded as: a bare content
    array (a hook's view of a server that is not wrapped) or, recorded before that rule, a proxy's result
    with ``structuredContent``, which no replay would show a body."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return text
    if is_mcp(tool):
        return call_result(value)
    return value


# --- paths through an output -----------------------------------------------------------------------

# A path step: ("key", name), ("json",), ("trim",), ("lines",), ("words",), ("row", rule).
PathStep = tuple[Any, ...]


@dataclass(frozen=True)
class Crossing:
    """A concrete list index on the way to a leaf, with the list, so a rule can be found for it."""

    rows: Sequence[Any]
    index: int


@dataclass(frozen=True)
class Occurrence:
    """Where a leaf sits in one output: the path with concrete indices (``("idx", Crossing)``)."""

    steps: tuple[Any, ...]
    value: Any


def _value_key(value: Any) -> tuple[str, Any] | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int | float):
        return ("n", float(value))
    return None


def _walk(value: Any, steps: tuple[Any, ...], depth: int, budget: list[int]) -> Iterator[Occurrence]:
    if budget[0] <= 0 or depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*steps, ("key", key)), depth + 1, budget)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, (*steps, ("idx", Crossing(value, i))), depth + 1, budget)
        return
    budget[0] -= 1
    yield Occurrence(steps, value)
    if not isinstance(value, str):
        return
    stripped = value.strip()
    if stripped != value and stripped:
        yield Occurrence((*steps, ("trim",)), stripped)
    if stripped[:1] in ("{", "[") and len(stripped) > 1:
        try:
            inner = json.loads(stripped)
        except ValueError:
            inner = None
        if isinstance(inner, dict | list):
            yield from _walk(inner, (*steps, ("json",)), depth + 1, budget)
            return
    if "\n" in stripped:
        lines = [line.strip() for line in stripped.split("\n")][:MAX_LINES]
        for i, line in enumerate(lines):
            if line:
                budget[0] -= 1
                at = (*steps, ("lines",), ("idx", Crossing(lines, i)))
                yield Occurrence(at, line)
                yield from _words(line, at, budget)


def _words(line: str, steps: tuple[Any, ...], budget: list[int]) -> Iterator[Occurrence]:
    """The words of one line of text output (``b4102 failed main 21m``): a value a later step reads may be one
    of them, picked by its place (the first word, the last)."""
    words = line.split()
    if len(words) < 2 or len(words) > MAX_WORDS:
        return
    for j, word in enumerate(words):
        budget[0] -= 1
        yield Occurrence((*steps, ("words",), ("idx", Crossing(words, j))), word)


@dataclass
class OutputIndex:
    """Every leaf of one output by value."""

    step: Recorded
    kept: bool
    by_value: dict[tuple[str, Any], list[Occurrence]] = field(default_factory=dict)
    strings: list[str] = field(default_factory=list)
    echoed: set[tuple[str, Any]] = field(default_factory=set)

    @classmethod
    def of(cls, step: Recorded, kept: bool) -> OutputIndex:
        index = cls(step, kept)
        for occ in _walk(step.input, (), 0, [MAX_LEAVES_PER_OUTPUT]):
            key = _value_key(occ.value)
            if key is not None:
                index.echoed.add(key)
        budget = [MAX_LEAVES_PER_OUTPUT]
        for occ in _walk(parse_output(step.tool, step.output), (), 0, budget):
            key = _value_key(occ.value)
            if key is None:
                continue
            bucket = index.by_value.setdefault(key, [])
            if not bucket and key[0] == "s":
                index.strings.append(key[1])
            bucket.append(occ)
        return index


# --- rules for a list crossing ---------------------------------------------------------------------

_MAX_CUES: Final = frozenset(
    {
        "highest",
        "most",
        "max",
        "maximum",
        "largest",
        "biggest",
        "top",
        "greatest",
        "worst",
        "hottest",
        "busiest",
        "longest",
        "heaviest",
        "newest",
        "latest",
        "best",
    }
)
_MIN_CUES: Final = frozenset(
    {
        "lowest",
        "least",
        "min",
        "minimum",
        "smallest",
        "fewest",
        "bottom",
        "cheapest",
        "shortest",
        "lightest",
        "oldest",
        "earliest",
    }
)


def _numeric_fields(rows: Sequence[Any]) -> list[str]:
    if not rows or not all(isinstance(r, dict) for r in rows):
        return []
    common = set(rows[0])
    for r in rows[1:]:
        common &= set(r)
    return sorted(f for f in common if all(isinstance(r[f], int | float) and not isinstance(r[f], bool) for r in rows))


def candidate_rules(rows: Sequence[Any], index: int) -> list[Rule]:
    """Every rule the recording supports for picking ``rows[index]``."""
    if len(rows) == 1:
        return ["only"]
    found: list[Rule] = []
    if index == 0:
        found.append("first")
    if index == len(rows) - 1:
        found.append("last")
    for name in _numeric_fields(rows):
        values = [r[name] for r in rows]
        mine = values[index]
        if mine == max(values) and values.count(mine) == 1:
            found.append(("max", name))
        if mine == min(values) and values.count(mine) == 1:
            found.append(("min", name))
    return found


def _field_words(name: str) -> list[str]:
    parts = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ").lower().split()
    return [p for p in parts if len(p) >= 3]


def choose_rule(candidates: Sequence[Rule], prompt_words: Sequence[str]) -> Rule | None:
    """The one rule the recording and the prompt's wording agree on, or None when it stays ambiguous."""
    if len(candidates) == 1:
        return candidates[0]
    ranked: list[Rule] = []
    wants_max = any(w in _MAX_CUES or (w.endswith("est") and w not in _MIN_CUES) for w in prompt_words)
    wants_min = any(w in _MIN_CUES for w in prompt_words)
    for rule in candidates:
        if isinstance(rule, tuple):
            direction, name = rule
            named = any(
                any(w.startswith(fw) or fw.startswith(w) for w in prompt_words if len(w) >= 4)
                for fw in _field_words(name)
            )
            if not named:
                continue
            if (
                (direction == "max" and wants_max and not wants_min)
                or (direction == "min" and wants_min)
                or (not wants_max and not wants_min)
            ):
                ranked.append(rule)
    if len(ranked) == 1:
        return ranked[0]
    if not ranked:
        if "first" in candidates and "first" in prompt_words:
            return "first"
        if "last" in candidates and any(w in ("last", "final") for w in prompt_words):
            return "last"
    return None


def describe_rule(rule: Rule) -> str:
    if isinstance(rule, tuple):
        return f"the row with the {'highest' if rule[0] == 'max' else 'lowest'} {rule[1]}"
    return {"only": "the only row", "first": "the first row", "last": "the last row"}[rule]


def crossing_key(where: str, steps: Sequence[Any], position: int) -> str:
    """A name for one list crossing of one output, the same in every run of a task: the producing step,
    the keys on the way to it and its place on the path."""
    keys = "/".join(str(s[1]) for s in steps[:position] if s[0] == "key")
    return f"{where}:{keys}#{sum(1 for s in steps[:position] if s[0] == 'idx')}"


def resolve(
    occ: Occurrence,
    prompt_words: Sequence[str],
    *,
    where: str = "",
    choices: Mapping[str, Rule] | None = None,
    ambiguous: list[tuple[str, list[Rule]]] | None = None,
) -> tuple[PathStep, ...]:
    """The occurrence's path with a rule at every list crossing.

    ``choices`` settles a crossing the recording and the prompt leave ambiguous (the rule a second run of
    the task agrees with); ``ambiguous`` hears every crossing that stayed ambiguous, with its candidates.

    Raises:
        Untraceable: a crossing no rule explains, or one where several fit and the prompt does not say which.
    """
    out: list[PathStep] = []
    for position, step in enumerate(occ.steps):
        if step[0] != "idx":
            out.append(step)
            continue
        crossing: Crossing = step[1]
        candidates = candidate_rules(crossing.rows, crossing.index)
        if not candidates:
            raise Untraceable(
                f"it is row {crossing.index + 1} of {len(crossing.rows)}, and no rule explains that row "
                "(not the only, the first, the last, nor the highest or lowest of a numeric field)"
            )
        chosen = choose_rule(candidates, prompt_words)
        key = crossing_key(where, occ.steps, position)
        if chosen is None and choices is not None and choices.get(key) in candidates:
            chosen = choices[key]
        if chosen is None and ambiguous is not None:
            ambiguous.append((key, list(candidates)))
        if chosen is None:
            said = ", ".join(describe_rule(r) for r in candidates)
            raise Untraceable(
                f"selector ambiguity: it is row {crossing.index + 1} of {len(crossing.rows)}, which is {said}; "
                "one recording cannot tell which was meant (a second run of the task, or words in the prompt, would)"
            )
        out.append(("row", chosen))
    return tuple(out)


def _is_category(occurrences: Sequence[Occurrence]) -> bool:
    """The same value in two rows of one list: a shared category, not a pick."""
    seen: dict[int, set[int]] = {}
    for occ in occurrences:
        for step in occ.steps:
            if step[0] == "idx":
                rows = seen.setdefault(id(step[1].rows), set())
                rows.add(step[1].index)
                if len(rows) > 1:
                    return True
    return False


# --- expressions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    sample: Any
    kind: Literal["string", "number"]
    spans: tuple[tuple[int, int], ...]
    case: Case = "same"

    @property
    def prompt_text(self) -> str:
        return str(self.sample)


@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class ParamRef:
    name: str
    case: Case = "same"


@dataclass(frozen=True)
class OutRef:
    key: str


@dataclass(frozen=True)
class Template:
    parts: tuple[str | ParamRef | OutRef, ...]


@dataclass(frozen=True)
class Obj:
    items: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Arr:
    items: tuple[Expr, ...]


Expr = Const | ParamRef | OutRef | Template | Obj | Arr


@dataclass(frozen=True)
class Extraction:
    """A value a step's output logic hands to later steps: ``respParams[key]`` = the leaf at ``path``."""

    key: str
    producer: int  # the scenario index of the producing step
    path: tuple[PathStep, ...]
    mcp: bool
    json_root: bool
    sample: Any


# --- the tracer ------------------------------------------------------------------------------------


def _identifier(name: str) -> str:
    parts = re.split(r"[^A-Za-z0-9]+", name)
    words = [p for p in parts if p]
    if not words:
        return "value"
    ident = words[0][:1].lower() + words[0][1:] + "".join(w[:1].upper() + w[1:] for w in words[1:])
    if not ident[0].isalpha():
        ident = "v" + ident
    return ident[:40]


def _bounded_pattern(value: str) -> re.Pattern[str]:
    joiners = re.escape(_JOINERS)
    return re.compile(rf"(?<!\w)(?<!\w[{joiners}]){re.escape(value)}(?!\w)(?![{joiners}]\w)", re.IGNORECASE)


def _number_pattern(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(text)}(?![\w]|\.\d)")


def _program_words(command: str) -> set[str]:
    """The programs a shell command runs (their names are never slots)."""
    heads: set[str] = set()
    for part in re.split(r"[|;&()]+", command):
        tokens = part.split()
        while tokens and "=" in tokens[0]:
            tokens = tokens[1:]
        if tokens:
            heads.add(tokens[0].rsplit("/", 1)[-1].lower())
    return heads


@dataclass
class Tracer:
    """Traces the kept steps of one run, in order. ``outputs`` holds every step's index (kept or not)."""

    prompt: str
    outputs: list[OutputIndex]
    # Prompt spans other runs of the task hold other values in: parameters, however the tokens fall.
    seeds: tuple[tuple[int, int], ...] = ()
    # Rules for crossings one recording leaves ambiguous, and the crossings that stayed so.
    choices: Mapping[str, Rule] = field(default_factory=dict)
    ambiguous: list[tuple[str, list[Rule]]] = field(default_factory=list)
    params: list[Param] = field(default_factory=list)
    extractions: list[Extraction] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)
    _keys: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.prompt_words = lexicon.words(self.prompt)

    def _unique(self, base: str, taken: set[str]) -> str:
        name, n = base, 2
        while name in taken:
            name = f"{base}{n}"
            n += 1
        taken.add(name)
        return name

    # - the prompt -

    def _prompt_param(self, value: Any, key: str, programs: set[str]) -> ParamRef | None:
        for param in self.params:
            if param.kind == "string" and isinstance(value, str) and shown_value(param) == value:
                return ParamRef(param.name, param.case)
            if param.kind == "number" and not isinstance(value, str) and param.sample == value:
                return ParamRef(param.name)
        if isinstance(value, str):
            if len(value) < MIN_PROMPT_VALUE_CHARS or lexicon.is_action_word(value) or value.lower() in programs:
                return None
            if value.lower() in lexicon.STOPWORDS:
                return None
            spans = tuple((m.start(), m.end()) for m in _bounded_pattern(value).finditer(self.prompt))
            if not spans:
                spans = tuple((a, b) for a, b in self.seeds if self.prompt[a:b].casefold() == value.casefold())
            if not spans:
                return None
            said = self.prompt[spans[0][0] : spans[0][1]]
            case: Case
            if said == value:
                case = "same"
            elif said.lower() == value:
                case = "lower"
            elif said.upper() == value:
                case = "upper"
            else:
                return None
            if any(self.prompt[s:e] != said for s, e in spans):
                return None
            name = self._unique(_identifier(key if key not in GENERIC_KEYS else "value"), self._names)
            self.params.append(Param(name, said, "string", spans, case))
            return ParamRef(name, case)
        text = json.dumps(value)
        spans = tuple((m.start(), m.end()) for m in _number_pattern(text).finditer(self.prompt))
        if not spans:
            return None
        name = self._unique(_identifier(key if key not in GENERIC_KEYS else "count"), self._names)
        self.params.append(Param(name, value, "number", spans))
        return ParamRef(name)

    # - earlier outputs -

    def _from_outputs(self, value: Any, before: int, key: str) -> OutRef | None:
        """``value`` threaded from the latest earlier output that explains it; None when no output holds it.

        Raises:
            Untraceable: an output holds it but no rule explains which row, or only a left-out step holds it.
        """
        vkey = _value_key(value)
        if vkey is None:
            return None
        problem: Untraceable | None = None
        for index in reversed(self.outputs[:before]):
            found = index.by_value.get(vkey)
            if not found or _is_category(found) or vkey in index.echoed:
                # An output that repeats its own step's argument explains nothing: that is the same constant.
                continue
            if not index.kept:
                problem = problem or Untraceable(
                    f"its value comes from step {index.step.index} ({index.step.tool}), which was left out"
                )
                continue
            for occ in sorted(found, key=lambda o: sum(1 for s in o.steps if s[0] == "idx")):
                try:
                    path = resolve(
                        occ,
                        self.prompt_words,
                        where=str(index.step.index),
                        choices=self.choices,
                        ambiguous=self.ambiguous,
                    )
                except Untraceable as exc:
                    problem = problem or Untraceable(
                        f"its value is in the output of step {index.step.index} ({index.step.tool}), but {exc.message}"
                    )
                    continue
                return self._extract(index, path, value, key)
        if problem is not None:
            raise problem
        return None

    def _extract(self, index: OutputIndex, path: tuple[PathStep, ...], value: Any, key: str) -> OutRef:
        producer = self._scenario_index(index.step.index)
        for ex in self.extractions:
            if ex.producer == producer and ex.path == path:
                return OutRef(ex.key)
        leaf = next((s[1] for s in reversed(path) if s[0] == "key" and isinstance(s[1], str)), key)
        name = self._unique(f"s{producer}_{_identifier(leaf)}", self._keys)
        root_json = not isinstance(parse_output(index.step.tool, index.step.output), str)
        self.extractions.append(Extraction(name, producer, path, is_mcp(index.step.tool), root_json, value))
        return OutRef(name)

    def _scenario_index(self, source_index: int) -> int:
        kept = [o.step.index for o in self.outputs if o.kept]
        return kept.index(source_index)

    # - templates -

    def _template(self, text: str, before: int, programs: set[str]) -> Template | None:
        # (text as it appears in the value, the reference; or the prompt word a parameter is made of on use)
        candidates: list[tuple[str, str | ParamRef | OutRef]] = []
        for param in self.params:
            if param.kind == "string" and len(shown_value(param)) >= MIN_PROMPT_VALUE_CHARS:
                candidates.append((shown_value(param), ParamRef(param.name, param.case)))
        for word in {w.strip(".,;:!?\"'()[]{}") for w in self.prompt.split()}:
            if len(word) < MIN_PROMPT_VALUE_CHARS or word.lower() in programs or lexicon.is_action_word(word):
                continue
            if word.lower() in lexicon.STOPWORDS or word not in text or any(c[0] == word for c in candidates):
                continue
            if not any(c.isdigit() or c in _JOINERS + "_" for c in word):
                # A plain word inside a longer string is too often a coincidence ("script" in "</script>").
                continue
            if _bounded_pattern(word).search(self.prompt):
                candidates.append((word, word))
        for start, end in self.seeds:
            word = self.prompt[start:end]
            if len(word) >= MIN_PROMPT_VALUE_CHARS and word in text and all(c[0] != word for c in candidates):
                candidates.append((word, word))
        for index in reversed(self.outputs[:before]):
            if not index.kept:
                continue
            for value in index.strings:
                if len(value) >= MIN_TEMPLATE_OUTPUT_CHARS and value in text and value != text:
                    try:
                        threaded = self._from_outputs(value, before, "value")
                    except Untraceable:
                        continue
                    if threaded is not None:
                        candidates.append((value, threaded))
        if not candidates:
            return None
        parts: list[str | ParamRef | OutRef] = []
        i, literal = 0, ""
        candidates.sort(key=lambda c: -len(c[0]))
        while i < len(text):
            hit = next(
                (c for c in candidates if text.startswith(c[0], i) and self._bounded_at(text, i, len(c[0]))), None
            )
            if hit is None:
                literal += text[i]
                i += 1
                continue
            found = hit[1]
            ref: ParamRef | OutRef
            if isinstance(found, str):
                made = self._prompt_param(found, "value", programs)
                if made is None:
                    literal += text[i]
                    i += 1
                    continue
                ref = made
            else:
                ref = found
            if literal:
                parts.append(literal)
                literal = ""
            parts.append(ref)
            i += len(hit[0])
        if literal:
            parts.append(literal)
        if all(isinstance(p, str) for p in parts):
            return None
        return Template(tuple(parts))

    @staticmethod
    def _bounded_at(text: str, start: int, length: int) -> bool:
        before = text[start - 1] if start > 0 else ""
        after = text[start + length] if start + length < len(text) else ""
        return not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_")

    # - a step's input -

    def trace_input(self, step: Recorded, before: int) -> Expr:
        """The expression that rebuilds ``step``'s input.

        Raises:
            Untraceable: an argument the recording cannot explain (its ``path`` says which).
        """
        if isinstance(step.input, str):
            raise Untraceable("its input was recorded as capped text (it was too large), so it cannot be rebuilt")
        programs = (
            _program_words(step.input.get("command", ""))
            if isinstance(step.input, dict) and isinstance(step.input.get("command"), str)
            else set()
        )
        return self._trace(step.input, (), before, programs)

    def _trace(self, value: Any, path: tuple[str, ...], before: int, programs: set[str]) -> Expr:
        where = ".".join(path) or "(input)"
        try:
            if isinstance(value, dict):
                return Obj(tuple((k, self._trace(v, (*path, str(k)), before, programs)) for k, v in value.items()))
            if isinstance(value, list):
                return Arr(tuple(self._trace(v, (*path, str(i)), before, programs) for i, v in enumerate(value)))
            key = next((p for p in reversed(path) if not p.isdigit()), "value")
            if path == ("description",):
                # A command's description is the model's note on the call, not an argument of the task.
                return Const(value)
            if isinstance(value, str):
                return self._string(value, key, before, programs)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self._number(value, key, before)
            return Const(value)
        except Untraceable as exc:
            if exc.path:
                raise
            raise Untraceable(exc.message, path=where) from None

    def _string(self, value: str, key: str, before: int, programs: set[str]) -> Expr:
        if REDACTED in value:
            raise Untraceable("it held a secret the recorder redacted, so the real value is not in the recording")
        ref = self._prompt_param(value, key, programs)
        if ref is not None:
            return ref
        out = self._from_outputs(value, before, key) if len(value) >= MIN_PROMPT_VALUE_CHARS else None
        if out is not None:
            return out
        template = self._template(value, before, programs)
        if template is not None:
            return template
        self._refuse_transformed(value)
        return Const(value)

    def _refuse_transformed(self, value: str) -> None:
        """A one-word constant that is a prompt word changed (``us-east`` → ``us-east-1``) is a transformation
        one recording cannot show; made a constant, it would run the old value for a new prompt."""
        if len(value) < 4 or not re.fullmatch(r"[\w.-]+", value):
            # Only an identifier-like value (a region, a key) can be a prompt word in another form.
            return
        folded = value.casefold()
        said = [w.strip(".,;:!?\"'()[]{}").casefold() for w in self.prompt.split()]
        phrases = set(said) | {a + j + b for a, b in itertools.pairwise(said) for j in ("-", "_", "")}
        if folded in phrases:
            # The prompt's own words, joined: the same value, not a transformation of it.
            return
        for word in phrases:
            if len(word) < 4 or word == folded or word in lexicon.STOPWORDS or lexicon.verb_class(word):
                continue
            shorter, longer = sorted((word, folded), key=len)
            if shorter in longer and len(shorter) >= 0.5 * len(longer):
                raise Untraceable(
                    f"it holds {value!r}, which looks like the prompt's {word!r} transformed; one recording cannot "
                    "show the transformation (a second run, or a model pass, could)"
                )

    def _number(self, value: float, key: str, before: int) -> Expr:
        ref = self._prompt_param(value, key, set())
        if ref is not None:
            return ref
        if len(json.dumps(value)) >= MIN_TRACED_NUMBER_CHARS:
            out = self._from_outputs(value, before, key)
            if out is not None:
                return out
        return Const(value)


def shown_value(param: Param) -> Any:
    """What a parameter's sample becomes in the call (after its case change)."""
    if param.kind != "string":
        return param.sample
    return (
        param.sample.lower()
        if param.case == "lower"
        else param.sample.upper()
        if param.case == "upper"
        else param.sample
    )


def rebuild(expr: Expr, params: dict[str, Any], resp: dict[str, Any]) -> Any:
    """What ``expr`` evaluates to (the Python twin of the emitted JavaScript; used by tests and checks)."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, ParamRef):
        value = params[expr.name]
        return value.lower() if expr.case == "lower" else value.upper() if expr.case == "upper" else value
    if isinstance(expr, OutRef):
        return resp[expr.key]
    if isinstance(expr, Template):
        return "".join(p if isinstance(p, str) else str(rebuild(p, params, resp)) for p in expr.parts)
    if isinstance(expr, Obj):
        return {k: rebuild(v, params, resp) for k, v in expr.items}
    return [rebuild(v, params, resp) for v in expr.items]
