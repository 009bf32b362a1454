"""Slot alignment (issue 18 item 4): a new prompt matches a recorded one when it differs only inside the
recorded prompt's parameter spans, and the new spans are the new values. Pure, no I/O.

Both prompts are cut into the same tokens — runs of letters and digits, and every other visible
character alone — so a slot and its neighbours split the same way on both sides (``#4512`` is ``#``
and ``4512``; ``eu-west-1`` is ``eu``, ``-``, ``west``, ``-``, ``1``). The token lists are diffed
(``difflib``, case-folded); every difference must fall inside a slot (sentence punctuation and "please" are not
tokens at all). A slot may grow at its edge only where no space separates the new tokens from it. A new value
must look like the recorded one: a number stays a number, a value without spaces gains none, and a
word that names an action is never a value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bir.hooks.local import words as lexicon

MAX_VALUE_CHARS: Final = 200
_TOKEN: Final = re.compile(r"[^\W_]+|\S", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    start: int
    end: int

    @property
    def folded(self) -> str:
        return self.text.casefold()


def tokenize(text: str) -> list[Token]:
    """The tokens that can tell two prompts apart (sentence punctuation and "please" are dropped)."""
    return [
        Token(m.group(0), m.start(), m.end())
        for m in _TOKEN.finditer(text)
        if m.group(0).casefold() not in lexicon.IGNORABLE
    ]


def normalized(text: str) -> str:
    """The prompt as the exact tier compares it: case-folded, spacing and end punctuation ignored."""
    return " ".join(t.folded for t in tokenize(text))


@dataclass(frozen=True, slots=True)
class Slot:
    param: str
    kind: str
    first: int  # the first token of the slot
    last: int  # one past its last token


@dataclass(frozen=True)
class Template:
    """A recorded prompt with its parameter spans, tokenized once."""

    text: str
    tokens: tuple[Token, ...]
    slots: tuple[Slot, ...]
    samples: Mapping[str, Any]

    @classmethod
    def of(cls, template: Mapping[str, Any], samples: Mapping[str, Any]) -> Template:
        text = str(template.get("text", ""))
        tokens = tuple(tokenize(text))
        slots = []
        for raw in template.get("slots") or []:
            start, end = int(raw["start"]), int(raw["end"])
            first = next((i for i, t in enumerate(tokens) if t.start >= start), len(tokens))
            last = next((i for i, t in enumerate(tokens) if t.start >= end), len(tokens))
            if first < last:
                slots.append(Slot(str(raw["param"]), str(raw.get("kind", "string")), first, last))
        return cls(text, tokens, tuple(slots), dict(samples))

    def literal_words(self) -> set[str]:
        """The word tokens outside every slot (what a new prompt must hold to be worth aligning)."""
        inside = {i for s in self.slots for i in range(s.first, s.last)}
        return {t.folded for i, t in enumerate(self.tokens) if i not in inside and t.text[0].isalnum()}


@dataclass(frozen=True)
class Aligned:
    values: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    why: str


def _slot_of(slots: Sequence[Slot], i1: int, i2: int) -> Slot | None:
    for slot in slots:
        if i1 < i2 and slot.first <= i1 and i2 <= slot.last:
            return slot
        if i1 == i2 and slot.first <= i1 <= slot.last:
            return slot
    return None


def _coerce(slot: Slot, text: str, sample: Any) -> Any | Refused:
    if not text or len(text) > MAX_VALUE_CHARS:
        return Refused(f"the value for {slot.param} is empty or too long")
    if isinstance(sample, str) and not any(c.isspace() for c in sample) and any(c.isspace() for c in text):
        return Refused(f"the value for {slot.param} would hold spaces the recorded one did not")
    if lexicon.is_action_word(text):
        return Refused(f"{text!r} names an action, not a value for {slot.param}")
    if slot.kind == "number":
        try:
            number = float(text)
        except ValueError:
            return Refused(f"the value for {slot.param} is not a number")
        if isinstance(sample, int) and not isinstance(sample, bool):
            if not number.is_integer():
                return Refused(f"the value for {slot.param} is not a whole number")
            return int(number)
        return number
    return text


def coerce(slot: Slot, text: str, sample: Any) -> Any | Refused:
    """``text`` as a value of ``slot``, shaped like its recorded ``sample``, or why it cannot be."""
    return _coerce(slot, text, sample)


def _attached(slot: Slot, at: int, new: Sequence[Token], j1: int, j2: int) -> bool:
    """An insertion at a slot's edge belongs to the slot only when no space parts it from the slot."""
    if slot.first < at < slot.last:
        return True
    if at == slot.last and j1 > 0:
        return new[j1 - 1].end == new[j1].start
    if at == slot.first and j2 < len(new):
        return new[j2 - 1].end == new[j2].start
    return False


def _edges(opcodes: Sequence[tuple[str, int, int, int, int]], slot: Slot, new: Sequence[Token]) -> tuple[int, int]:
    """Where the slot's first and last token boundaries land in the new prompt (-1: nowhere)."""
    start = end = -1
    for tag, i1, i2, j1, j2 in opcodes:
        if i1 == i2:
            if i1 == slot.first and _attached(slot, i1, new, j1, j2):
                start = j1 if start < 0 else min(start, j1)
            if i1 == slot.last and _attached(slot, i1, new, j1, j2):
                end = max(end, j2)
            continue
        if i1 <= slot.first < i2:
            at = j1 + (slot.first - i1) if tag == "equal" else j1
            start = at if start < 0 else min(start, at)
        if i1 < slot.last <= i2:
            end = max(end, j1 + (slot.last - i1) if tag == "equal" else j2)
    return start, end


def align(template: Template, prompt: str) -> Aligned | Refused:
    """The new values when ``prompt`` differs from the template only inside its slots."""
    new = tokenize(prompt)
    a = [t.folded for t in template.tokens]
    b = [t.folded for t in new]
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        slot = _slot_of(template.slots, i1, i2)
        if slot is not None and (i1 < i2 or _attached(slot, i1, new, j1, j2)):
            continue
        return Refused(_difference(template.tokens[i1:i2], new[j1:j2]))
    values: dict[str, Any] = {}
    for slot in template.slots:
        j1, j2 = _edges(opcodes, slot, new)
        if j1 < 0 or j2 <= j1:
            return Refused(f"no value for {slot.param} in the new prompt")
        text = prompt[new[j1].start : new[j2 - 1].end]
        value = _coerce(slot, text, template.samples.get(slot.param))
        if isinstance(value, Refused):
            return value
        if slot.param in values and str(values[slot.param]).casefold() != str(value).casefold():
            return Refused(f"{slot.param} takes two different values in the new prompt")
        values[slot.param] = value
    return Aligned(values)


def _difference(old: Sequence[Token], new: Sequence[Token]) -> str:
    said_old = " ".join(t.text for t in old) or "nothing"
    said_new = " ".join(t.text for t in new) or "nothing"
    return f"the prompts differ outside the recorded parameters: {said_old!r} became {said_new!r}"[:300]


# --- the shape of a value, for the embedding tier ----------------------------------------------------


def shape_pattern(sample: Any) -> re.Pattern[str]:
    """A pattern for values shaped like ``sample``: letters for letters, digits for digits, the rest as is."""
    text = str(sample)
    parts: list[str] = []
    for m in re.finditer(r"[^\W\d_]+|\d+|.", text, re.UNICODE):
        piece = m.group(0)
        if piece.isdigit():
            parts.append(r"\d+")
        elif piece.isalpha():
            parts.append(r"[^\W\d_]+")
        else:
            parts.append(re.escape(piece))
    return re.compile(r"(?<![\w\-./])" + "".join(parts) + r"(?![\w]|[\-./]\w)", re.UNICODE)


def values_by_shape(template: Template, prompt: str) -> dict[str, Any] | Refused:
    """Each slot's value found in ``prompt`` by the shape of its recorded value, when exactly one fits."""
    literal = template.literal_words()
    values: dict[str, Any] = {}
    spans: list[tuple[int, int]] = []
    for slot in template.slots:
        if slot.param in values:
            continue
        sample = template.samples.get(slot.param)
        found = []
        for m in shape_pattern(sample).finditer(prompt):
            text = m.group(0)
            folded = text.casefold()
            if folded in literal or folded in lexicon.STOPWORDS or lexicon.is_action_word(text):
                continue
            if any(not (m.end() <= s or m.start() >= e) for s, e in spans):
                continue
            found.append(m)
        if len(found) != 1:
            return Refused(f"{len(found)} places in the prompt could be the value for {slot.param}")
        value = _coerce(slot, found[0].group(0), sample)
        if isinstance(value, Refused):
            return value
        values[slot.param] = value
        spans.append((found[0].start(), found[0].end()))
    return values


def masked(text: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """``text`` with each span replaced by its parameter's name (how both sides are embedded)."""
    out = text
    for start, end, name in sorted(spans, reverse=True):
        out = out[:start] + name + out[end:]
    return out


def template_spans(template: Template) -> list[tuple[int, int, str]]:
    return [(template.tokens[s.first].start, template.tokens[s.last - 1].end, s.param) for s in template.slots]


def value_spans(template: Template, prompt: str, values: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    spans = []
    for name, value in values.items():
        index = prompt.casefold().find(str(value).casefold())
        if index >= 0:
            spans.append((index, index + len(str(value)), name))
    return spans
