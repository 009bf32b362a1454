"""A Claude Code transcript read as prompt turns (issue 19 item 1): pure, no I/O but the bytes handed in.

Claude Code keeps each session as JSON lines under ``~/.claude/projects/<project>/<session>.jsonl``
(FACTS.md §5; seen on 2.1.197 and 2.1.332). What a turn is made of:

- **the prompt**: a ``user`` line of the main chain whose content is the person's text (not a tool
  result, not a ``<command-…>``/``<local-command-…>`` echo, not an interruption notice, not meta);
- **the calls**: ``tool_use`` blocks of the main chain's ``assistant`` lines, each joined by its id to
  the ``tool_result`` block of a later ``user`` line, whose line carries the structured result as
  ``toolUseResult`` — the same value a ``PostToolUse`` hook receives as ``tool_response`` (an MCP call's
  content array, ``Bash``'s ``{stdout, stderr, …}``, ``Read``'s ``{type, file}``); a failed call's is
  the error text;
- **the usage**: every ``assistant`` line repeats its message's usage once per content block, so lines
  are folded by ``message.id`` (the largest value of each field wins);
- **subagents** (side chains, ``isSidechain: true``): their lines sit in the session's own file on older
  versions and in ``<session>/subagents/agent-*.jsonl`` on newer ones, carrying the parent turn's
  ``promptId``. Their tool calls were chosen by a model from a prompt the model wrote, so they are never
  steps of the turn (the turn keeps the ``Agent``/``Task`` call itself, which the calculator leaves out);
  their usage is the turn's cost all the same and is added to it.

A turn is complete once the next prompt starts, or when its last message ended the turn with no call
left open, or when the file has been idle long enough that nothing more will come. Reading stops at the
first incomplete turn, and ``resume_at`` says where the next read starts, so a grown transcript is read
from where it stopped and a turn is never taken half.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from bir.core.directive import TAG as DIRECTIVE_TAG
from bir.core.housekeeping import BIR_TOOL_PREFIX
from bir.core.pricing import USAGE_FIELDS, token_count

# A line longer than this is not parsed (a giant tool result): its call is recorded as unread.
MAX_LINE_BYTES: Final = 8 * 1024 * 1024
SUBAGENT_TOOLS: Final = frozenset({"Agent", "Task"})
_NOT_PROMPTS: Final = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<system-reminder>",
    "<user-memory-input>",
    "Caveat: ",
    "[Request interrupted",
)
_INTERESTING: Final = (b'"type":"user"', b'"type":"assistant"', b'"type": "user"', b'"type": "assistant"')
_TAG: Final = DIRECTIVE_TAG.encode()


@dataclass
class Call:
    """One tool call of a turn, with its result once the transcript holds it."""

    tool_use_id: str
    name: str
    input: Any
    started: float | None
    answered: bool = False
    result: Any = None
    error: str | None = None
    ended: float | None = None
    unread: int = 0  # the bytes of a result line too large to read

    @property
    def duration_ms(self) -> int | None:
        if self.started is None or self.ended is None:
            return None
        return max(0, round((self.ended - self.started) * 1000))


@dataclass
class Turn:
    """One prompt and what the session did with it until the next one."""

    session_id: str
    prompt_id: str | None
    prompt: str
    start_offset: int
    cwd: str | None = None
    version: str | None = None
    started: float | None = None
    ended: float | None = None
    calls: list[Call] = field(default_factory=list)
    answer: str = ""
    # message id -> (model, usage counts); side chains' messages included
    usage: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    replayed: bool = False
    subagents: int = 0
    sidechain_calls: int = 0
    end_offset: int = 0
    ended_turn: bool = False

    @property
    def open_calls(self) -> int:
        return sum(1 for c in self.calls if not c.answered)

    def add_usage(self, key: str, model: str, counts: Mapping[str, int]) -> None:
        previous = self.usage.get(key)
        if previous is None:
            self.usage[key] = (model, dict(counts))
        else:
            self.usage[key] = (previous[0], {n: max(previous[1].get(n, 0), counts.get(n, 0)) for n in USAGE_FIELDS})

    def usage_by_model(self) -> dict[str, dict[str, int]]:
        """The turn's tokens per model, each message once."""
        totals: dict[str, dict[str, int]] = {}
        for model, counts in self.usage.values():
            acc = totals.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0))
            for name in USAGE_FIELDS:
                acc[name] += counts.get(name, 0)
        return {m: c for m, c in sorted(totals.items()) if any(c.values())}


@dataclass(frozen=True)
class Reading:
    """What one read of a transcript found: its complete turns, where the next read starts, and what it
    could not take."""

    turns: list[Turn]
    resume_at: int
    incomplete: int = 0
    unreadable_lines: int = 0


def timestamp(value: object) -> float | None:
    """An ISO timestamp (``2026-11-29T18:17:31.071Z``) as epoch seconds; None when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        ).strip()
    return ""


def prompt_of(record: Mapping[str, Any]) -> str | None:
    """The person's prompt when ``record`` starts a turn of the main chain, else None."""
    if record.get("type") != "user" or record.get("isSidechain") or record.get("isMeta"):
        return None
    if record.get("isCompactSummary") or record.get("isVisibleInTranscriptOnly"):
        return None
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    text = _text(content).strip()
    if not text or text.startswith(_NOT_PROMPTS):
        return None
    return text


def _usage_of(message: Mapping[str, Any]) -> tuple[str, dict[str, int]] | None:
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    model = message.get("model")
    return (model if isinstance(model, str) and model else "unknown"), {n: token_count(usage, n) for n in USAGE_FIELDS}


def _lines(data: bytes, base: int) -> Iterator[tuple[int, int, bytes]]:
    """``(start, end, line)`` for every whole line of ``data`` (a last line without its newline is not whole)."""
    start = 0
    while True:
        cut = data.find(b"\n", start)
        if cut < 0:
            return
        yield base + start, base + cut + 1, data[start:cut]
        start = cut + 1


@dataclass
class _Reader:
    base: int
    turns: list[Turn] = field(default_factory=list)
    current: Turn | None = None
    by_id: dict[str, Call] = field(default_factory=dict)
    unreadable: int = 0

    def line(self, start: int, end: int, raw: bytes) -> None:
        if self.current is not None and _TAG in raw:
            # bir's own directive reached this turn: it was replayed, not done by the model alone.
            self.current.replayed = True
        if not any(marker in raw for marker in _INTERESTING):
            if self.current is not None:
                self.current.end_offset = end
            return
        if len(raw) > MAX_LINE_BYTES:
            self.unreadable += 1
            self._oversized(raw, end)
            return
        try:
            record = json.loads(raw)
        except ValueError:
            self.unreadable += 1
            return
        if not isinstance(record, dict):
            return
        prompt = prompt_of(record)
        if prompt is not None:
            self._start(record, prompt, start, end)
            return
        turn = self.current
        if turn is None:
            return
        turn.end_offset = end
        stamp = timestamp(record.get("timestamp"))
        if stamp is not None:
            turn.ended = stamp
        if record.get("type") == "assistant":
            self._assistant(turn, record, stamp)
        elif record.get("type") == "user":
            self._results(turn, record, stamp)

    def _start(self, record: Mapping[str, Any], prompt: str, start: int, end: int) -> None:
        if self.current is not None:
            self.current.ended_turn = True
            self.turns.append(self.current)
        stamp = timestamp(record.get("timestamp"))
        prompt_id = record.get("promptId")
        self.current = Turn(
            session_id=str(record.get("sessionId") or ""),
            prompt_id=prompt_id if isinstance(prompt_id, str) and prompt_id else None,
            prompt=prompt,
            start_offset=start,
            cwd=record.get("cwd") if isinstance(record.get("cwd"), str) else None,
            version=record.get("version") if isinstance(record.get("version"), str) else None,
            started=stamp,
            ended=stamp,
            end_offset=end,
        )
        self.by_id = {}

    def _assistant(self, turn: Turn, record: Mapping[str, Any], stamp: float | None) -> None:
        message = record.get("message")
        if not isinstance(message, dict):
            return
        used = _usage_of(message)
        if used is not None:
            key = message.get("id") or record.get("requestId") or record.get("uuid") or f"line{turn.end_offset}"
            turn.add_usage(str(key), *used)
        sidechain = record.get("isSidechain") is True
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                if sidechain:
                    turn.sidechain_calls += 1
                    continue
                name = str(block.get("name") or "")
                if name.startswith(BIR_TOOL_PREFIX):
                    turn.replayed = turn.replayed or name == f"{BIR_TOOL_PREFIX}run_scenario"
                if name in SUBAGENT_TOOLS:
                    turn.subagents += 1
                call = Call(block["id"], name, block.get("input"), stamp)
                turn.calls.append(call)
                self.by_id[call.tool_use_id] = call
            elif block.get("type") == "text" and not sidechain and str(block.get("text", "")).strip():
                turn.answer = str(block["text"])
        if not sidechain and message.get("stop_reason") is not None:
            turn.ended_turn = message.get("stop_reason") == "end_turn"

    def _results(self, turn: Turn, record: Mapping[str, Any], stamp: float | None) -> None:
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return
        blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        structured = record.get("toolUseResult", _MISSING) if len(blocks) == 1 else _MISSING
        for block in blocks:
            call = self.by_id.get(str(block.get("tool_use_id")))
            if call is None:
                continue
            call.answered = True
            call.ended = stamp
            if block.get("is_error") is True:
                call.error = _text(block.get("content")) or (structured if isinstance(structured, str) else "error")
                call.result = {"error": call.error}
            elif structured is not _MISSING:
                call.result = structured
            else:
                raw = block.get("content")
                call.result = raw if not isinstance(raw, str) else [{"type": "text", "text": raw}]

    def _oversized(self, raw: bytes, end: int) -> None:
        turn = self.current
        if turn is None:
            return
        turn.end_offset = end
        for call in turn.calls:
            if not call.answered and call.tool_use_id.encode() in raw[:4096]:
                call.answered = True
                call.unread = len(raw)
                call.result = f"(the result was {len(raw)} bytes in the transcript, too large to read)"
                return

    def finish(self, *, at_eof: bool, idle: bool) -> Reading:
        incomplete = 0
        resume = self.base
        if self.turns:
            resume = self.turns[-1].end_offset
        current = self.current
        if current is not None:
            done = idle or (at_eof and current.ended_turn and current.open_calls == 0)
            if done:
                self.turns.append(current)
                resume = current.end_offset
            else:
                incomplete = 1
                resume = current.start_offset
        return Reading(self.turns, resume, incomplete, self.unreadable)


_MISSING: Final = object()


def read_turns(data: bytes, base: int, *, at_eof: bool, idle: bool = False) -> Reading:
    """The complete turns in ``data`` (the bytes of a transcript from offset ``base``, a turn's start or 0).

    ``at_eof``: ``data`` reaches the file's end, so a last turn that ended cleanly is complete; ``idle``:
    the file has not changed for long, so its last turn is complete whatever state it was left in.
    """
    reader = _Reader(base)
    for start, end, raw in _lines(data, base):
        reader.line(start, end, raw)
    return reader.finish(at_eof=at_eof, idle=idle)


def sidechain_usage(data: bytes) -> dict[str, dict[str, tuple[str, dict[str, int]]]]:
    """A subagent file's usage by the parent turn's ``promptId``: ``{promptId: {message id: (model, counts)}}``."""
    found: dict[str, dict[str, tuple[str, dict[str, int]]]] = {}
    prompt_id: str | None = None
    for _start, _end, raw in _lines(data, 0):
        if len(raw) > MAX_LINE_BYTES or not any(marker in raw for marker in _INTERESTING):
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if isinstance(record.get("promptId"), str):
            prompt_id = record["promptId"]
        message = record.get("message")
        if record.get("type") != "assistant" or not isinstance(message, dict) or prompt_id is None:
            continue
        used = _usage_of(message)
        if used is not None:
            key = str(message.get("id") or record.get("requestId") or record.get("uuid"))
            found.setdefault(prompt_id, {})[key] = used
    return found
