"""The injection guard for derived values (spec §13.2 mitigation 6).

A scenario is a pre-approved list of tool calls whose arguments are computed from values derived for
this turn, so a derived value is the one place a prompt could smuggle a command into a replay. In a
plan with a step whose input is *run* (``Bash``, ``PowerShell``, or an MCP tool or server named for
SQL, queries, ``exec`` or a shell), every derived value that differs from its recorded sample must be
free of shell and SQL metacharacters and keep the sample's shape: a number stays a number, nothing
starts with ``-``, and no whitespace, glob, brace or parenthesis appears that the sample did not
have. A plan whose only such steps write files rejects only line breaks and NUL; any other plan
accepts everything. A value equal to its sample always passes; lists and objects are checked leaf by
leaf (keys included).

Values read from earlier tool outputs (``respParams``) are checked too, step by step
(``check_output_values``): a step whose tool runs its input or writes a file may read only values that
pass the same rules, with no sample to widen them (a plain word, a number, a path). Whoever can write
what a scenario reads (a file, an issue, a web page, an MCP server's answer) must not be able to write
the command a step then runs without a prompt (issue 16).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from bir.core.tool_kinds import input_is_run, writes_file
from bir.core.truncate import cut
from bir.core.types import Scenario, ScenarioStep

Strictness = Literal["run", "write", "none"]

# Never allowed in a changed value of a plan that runs its input: each can end, chain, redirect,
# quote or substitute a shell word, or end or quote an SQL literal.
_SHELL_META: Final = frozenset(";&|`$<>\\'\"")
_SQL_COMMENTS: Final = ("--", "/*", "*/")
# Allowed only where the sample already had one.
_SHAPE_CHARS: Final = {
    "*": "a glob",
    "?": "a glob",
    "[": "a glob",
    "]": "a glob",
    "{": "a brace",
    "}": "a brace",
    "(": "a parenthesis",
    ")": "a parenthesis",
    "~": "a tilde",
    "!": "a '!'",
    "#": "a '#'",
}
# Every character str.splitlines() breaks on.
_LINE_BREAKS: Final = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_MAX_LEAVES: Final = 10_000
_MAX_DEPTH: Final = 32
_NAME_CHARS: Final = 120


@dataclass(frozen=True)
class SafetyVerdict:
    """Whether every derived value may go into the plan; if not, which one and why."""

    ok: bool
    name: str | None
    reason: str


class _Refused(Exception):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(why)
        self.path = path
        self.why = why


# `respParams.name`, `respParams?.name`, `respParams["name"]`, `respParams?.['name']`.
_RESP_NAME = re.compile(r"""\brespParams\b""")
_RESP_KEY = re.compile(
    r"""\s*(?:\?\.\s*|\.\s*)(?P<name>[A-Za-z_$][\w$]*)|\s*(?:\?\.)?\s*\[\s*(?P<q>["'])(?P<key>[^"'\\]{0,200})(?P=q)\s*\]"""
)
# A body naming these can reach its arguments without naming respParams.
_ARGUMENTS = re.compile(r"""\barguments\b""")


def plan_runs_input(scenario: Scenario) -> bool:
    """True when a step of the plan runs its input (then recent tool results stay out of derivation)."""
    return any(input_is_run(step.tool_name) for step in scenario.steps)


def strictness(scenario: Scenario) -> Strictness:
    """How strictly the plan's derived values are checked: ``run``, ``write`` or ``none``."""
    if plan_runs_input(scenario):
        return "run"
    if any(writes_file(step.tool_name) for step in scenario.steps):
        return "write"
    return "none"


def _same(a: object, b: object, depth: int = 0) -> bool:
    """JSON equality: ``True`` is not ``1``, but ``1`` is ``1.0``."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    return a is None and b is None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Checker:
    def __init__(self, mode: Strictness) -> None:
        self.mode = mode
        self.leaves = 0

    def value(self, value: object, sample: object, path: str, depth: int) -> None:
        if _same(value, sample):
            return
        self.leaves += 1
        if self.leaves > _MAX_LEAVES:
            raise _Refused(path, "too many values to check")
        if depth > _MAX_DEPTH:
            raise _Refused(path, "nested too deeply to check")
        if isinstance(value, Mapping):
            sample_map = sample if isinstance(sample, Mapping) else {}
            for key, item in value.items():
                key_text = str(key)
                if key not in sample_map:
                    self.text(key_text, None, f"{path}.{key_text} (key)")
                self.value(item, sample_map.get(key), f"{path}.{key_text}", depth + 1)
            return
        if isinstance(value, list | tuple):
            sample_list = sample if isinstance(sample, list | tuple) else []
            for n, item in enumerate(value):
                # A list that grew is held to the shape of its first sample element.
                item_sample = sample_list[n] if n < len(sample_list) else (sample_list[0] if sample_list else None)
                self.value(item, item_sample, f"{path}[{n}]", depth + 1)
            return
        if self.mode == "run" and _is_number(sample) and not _is_number(value):
            raise _Refused(path, f"was a number, is now {type(value).__name__}")
        if value is None or isinstance(value, bool):
            return
        if isinstance(value, int | float):
            if self.mode == "run" and value < 0:
                raise _Refused(path, "starts with '-'")
            return
        self.text(value if isinstance(value, str) else str(value), sample, path)

    def text(self, text: str, sample: object, path: str) -> None:
        if "\x00" in text:
            raise _Refused(path, "contains a NUL character")
        if any(c in _LINE_BREAKS for c in text):
            raise _Refused(path, "contains a line break")
        if self.mode != "run":
            return
        sample_text = sample if isinstance(sample, str) else "" if sample is None else str(sample)
        sample_chars = frozenset(sample_text)
        for c in text:
            if c in _SHELL_META:
                raise _Refused(path, f"contains a shell metacharacter {c!r}")
            if (ord(c) < 0x20 or ord(c) == 0x7F) and not c.isspace():
                raise _Refused(path, f"contains a control character {c!r}")
        for comment in _SQL_COMMENTS:
            if comment in text:
                raise _Refused(path, f"contains an SQL comment {comment!r}")
        if text.startswith("-"):
            raise _Refused(path, "starts with '-'")
        if any(c.isspace() and c not in sample_chars for c in text):
            raise _Refused(path, "contains whitespace the sample did not have")
        for c in text:
            kind = _SHAPE_CHARS.get(c)
            if kind is not None and c not in sample_chars:
                raise _Refused(path, f"contains {kind} {c!r} the sample did not have")


def check_derived_values(scenario: Scenario, params: Mapping[str, object]) -> SafetyVerdict:
    """Check the values derived for this turn against the scenario's recorded samples.

    A name that is not in the scenario's ``params_object`` has no sample, so it is held to the
    strictest shape (a plain word). Pure and bounded: at most 10,000 values are looked at.
    """
    mode = strictness(scenario)
    if mode == "none":
        return SafetyVerdict(True, None, "the plan neither runs its input nor writes files")
    checker = _Checker(mode)
    for name, value in params.items():
        spec = scenario.params_object.get(name)
        sample = spec.sample_value if spec is not None else None
        try:
            checker.value(value, sample, cut(str(name), _NAME_CHARS), 0)
        except _Refused as refused:
            shown = cut(refused.path, _NAME_CHARS)
            return SafetyVerdict(False, cut(str(name), _NAME_CHARS), f"{shown}: {refused.why}")
    if mode == "run":
        return SafetyVerdict(True, None, "every changed value is a plain word of its sample's shape")
    return SafetyVerdict(True, None, "no changed value breaks a line")


def step_strictness(tool_name: str) -> Strictness:
    """How strictly the values a step's input reads from earlier outputs are checked: ``run`` for a tool that
    runs its input, ``write`` for one that writes a file, ``none`` for anything else."""
    if input_is_run(tool_name):
        return "run"
    if writes_file(tool_name):
        return "write"
    return "none"


def hides_names(body: str) -> bool:
    """Whether a body may spell a name without its letters: JavaScript reads ``\\u0061`` (or ``\\u{61}``) in an
    identifier as ``a``, so ``respP\\u0061rams.file`` reads ``respParams.file`` where no text scan sees it."""
    return "\\u" in body


def resp_params_read(body: str | None) -> frozenset[str] | None:
    """The ``respParams`` keys a ``toolInputLogic`` body names, or None when it may read any of them
    (``respParams`` passed whole, indexed by a variable, destructured, ``arguments`` used, or a name that
    may be spelt with escapes, ``hides_names``)."""
    text = body or ""
    if _ARGUMENTS.search(text) or hides_names(text):
        return None
    names: set[str] = set()
    for found in _RESP_NAME.finditer(text):
        key = _RESP_KEY.match(text, found.end())
        if key is None:
            return None
        names.add(key.group("name") or key.group("key") or "")
    return frozenset(names)


def check_output_values(step: ScenarioStep, resp_params: Mapping[str, object]) -> SafetyVerdict:
    """Check the values a step's input reads from earlier tool outputs before the step runs or is pinned.

    For a step whose tool runs its input (shell, run tools) every value of each ``respParams`` key its
    ``toolInputLogic`` names (all of them when it reads ``respParams`` in another way) must be a plain word
    of no shell or SQL meaning: no metacharacter, whitespace, glob, brace, parenthesis, tilde or line break,
    nothing starting with ``-``. For a step that writes a file, no line break or NUL. Other steps read
    anything. Pure and bounded, like ``check_derived_values``; the local service's threading bodies rely
    on it.
    """
    mode = step_strictness(step.tool_name)
    if mode == "none":
        return SafetyVerdict(True, None, "the step neither runs its input nor writes a file")
    names = resp_params_read(step.tool_input_logic)
    keys = list(resp_params) if names is None else [name for name in resp_params if name in names]
    checker = _Checker(mode)
    for key in keys:
        shown = cut(str(key), _NAME_CHARS)
        try:
            checker.value(resp_params[key], None, f"respParams.{shown}", 0)
        except _Refused as refused:
            return SafetyVerdict(False, shown, f"{cut(refused.path, _NAME_CHARS)}: {refused.why}")
    if mode == "run":
        return SafetyVerdict(True, None, "every value read from an earlier output is a plain word")
    return SafetyVerdict(True, None, "no value read from an earlier output breaks a line")
