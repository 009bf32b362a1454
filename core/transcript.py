"""The per-run usage watermark over a Claude Code transcript (spec §11.4), and the run's tool calls.

Claude Code writes one transcript per *session* and a run is one prompt, so summing the whole file
would give run 3 the cost of runs 1+2+3. A run takes a mark when it starts and, when it is sealed,
asks for the usage written since.

The spec states it as per-model cumulative usage and a delta clamped at 0 per field. This module
computes the same delta without re-reading the whole session twice a turn: the mark is the file's
identity and length, plus the ids of the assistant messages just before that point; the delta is the
usage of the assistant messages that appear after it and were not already seen. A transcript that
was rotated or compacted (another file, or a shorter one) degrades to no usage, never to a negative one.

Each assistant message is counted once. Claude Code writes one line per content block, and every one
of them repeats the message's usage, so lines are folded by ``message.id`` (the largest value of each
field wins, which is the message's final usage); a line without an id counts once on its own.

The same window gives the run's tool calls (``tool_calls_since``), for the ones no hook saw (a call made
before the ``bir`` MCP server that carries the tool events' hooks was connected): each assistant line's
``tool_use`` block, and the ``tool_result`` of the user line that answers it, whose ``toolUseResult`` is
what the hook's ``tool_response`` would have been (FACTS.md §5; ``samples/transcript-*.jsonl``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bir.core.pricing import USAGE_FIELDS, token_count, total_cost_usd

# The most read for one delta. A turn that writes more than this is measured on its first 64 MiB.
MAX_READ_BYTES: Final = 64 * 1024 * 1024
# How far back from the mark to look for message ids whose lines may continue after it.
TAIL_BYTES: Final = 1024 * 1024
_CHUNK: Final = 1024 * 1024


@dataclass(frozen=True)
class ModelUsage:
    """Tokens spent on one model."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def as_usage(self) -> dict[str, int]:
        """The Anthropic ``usage`` mapping shape, for ``bir.core.pricing``."""
        return {name: getattr(self, name) for name in USAGE_FIELDS}

    @property
    def total_tokens(self) -> int:
        return sum(self.as_usage().values())

    def to_wire(self) -> dict[str, str | int]:
        """The service's camelCase usage object (a finish's and an execution report's ``usage`` items)."""
        return {
            "model": self.model,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheCreationInputTokens": self.cache_creation_input_tokens,
            "cacheReadInputTokens": self.cache_read_input_tokens,
        }


@dataclass(frozen=True)
class UsageMark:
    """Where a run's usage window starts in its transcript.

    ``measurable`` is false when the run had no transcript to mark: its report is then unmeasured.
    """

    path: str | None
    offset: int = 0
    file_id: tuple[int, int] | None = None
    seen_ids: frozenset[str] = field(default_factory=frozenset)

    @property
    def measurable(self) -> bool:
        return self.path is not None


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _lines(data: bytes) -> Iterator[bytes]:
    # Only lines that can hold an assistant's usage are worth a JSON parse; tool results can be
    # megabytes of text and are skipped on a substring test.
    for line in data.split(b"\n"):
        if b'"usage"' in line and b"assistant" in line:
            yield line


def _assistant_usage(line: bytes) -> tuple[str | None, str, dict[str, int]] | None:
    """``(message id, model, usage)`` of an assistant line, or None for anything else."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    if record.get("type") != "assistant" and message.get("role") != "assistant":
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    model = message.get("model")
    model = model if isinstance(model, str) and model else "unknown"
    msg_id = message.get("id")
    counts = {name: token_count(usage, name) for name in USAGE_FIELDS}
    return (msg_id if isinstance(msg_id, str) and msg_id else None), model, counts


def _read(path: str, start: int, limit: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(limit)


def _complete_lines(data: bytes, *, starts_mid_line: bool) -> bytes:
    """Drop a leading fragment (it belongs to a line that began before ``start``)."""
    if starts_mid_line:
        cut = data.find(b"\n")
        return b"" if cut < 0 else data[cut + 1 :]
    return data


def _ids_in(data: bytes) -> frozenset[str]:
    ids: set[str] = set()
    for line in _lines(data):
        parsed = _assistant_usage(line)
        if parsed is not None and parsed[0] is not None:
            ids.add(parsed[0])
    return frozenset(ids)


def mark_transcript_usage(path: str | Path | None) -> UsageMark:
    """Mark where a run's usage starts in the transcript at ``path``.

    A missing file marks its start (the session's transcript may not exist yet); ``None`` gives an
    unmeasurable mark. Never raises.
    """
    if path is None:
        return UsageMark(path=None)
    spath = os.fspath(path)
    st = _stat(spath)
    if st is None:
        return UsageMark(path=spath)
    offset = st.st_size
    seen: frozenset[str] = frozenset()
    try:
        tail_start = max(0, offset - TAIL_BYTES)
        tail = _read(spath, tail_start, offset - tail_start)
        seen = _ids_in(_complete_lines(tail, starts_mid_line=tail_start > 0))
    except OSError:
        pass
    return UsageMark(path=spath, offset=offset, file_id=(st.st_dev, st.st_ino), seen_ids=seen)


def _window(path: str | Path | None, mark: UsageMark) -> bytes | None:
    """The complete lines written to the transcript since ``mark`` (at most ``MAX_READ_BYTES``); None when
    there is no such window (no file, an unmeasurable mark, a transcript replaced or shortened since)."""
    if path is None or not mark.measurable:
        return None
    spath = os.fspath(path)
    st = _stat(spath)
    if st is None:
        return None
    if mark.file_id is not None and (st.st_dev, st.st_ino) != mark.file_id:
        return None
    if st.st_size < mark.offset:
        return None
    try:
        data = _read(spath, max(0, mark.offset - 1), min(st.st_size - mark.offset + 1, MAX_READ_BYTES))
    except OSError:
        return None
    if mark.offset > 0:
        # One byte before the mark says whether the window starts on a line boundary.
        data = _complete_lines(data[1:], starts_mid_line=data[:1] not in (b"\n", b""))
    return data


def usage_since(path: str | Path | None, mark: UsageMark) -> list[ModelUsage]:
    """Per-model usage written to the transcript since ``mark``, each field at least 0, sorted by model.

    Malformed lines are skipped; a missing file, an unmeasurable mark, or a transcript that was
    replaced or shortened since the mark give ``[]``. Reads at most ``MAX_READ_BYTES``. Never raises.
    """
    data = _window(path, mark)
    return [] if data is None else _fold(data, mark.seen_ids)


@dataclass(frozen=True)
class TranscriptCall:
    """One tool call of the transcript: the model's ``tool_use`` and, once written, its ``tool_result``.

    ``output`` is the line's ``toolUseResult`` (the hook's ``tool_response`` shape: Bash's
    ``{stdout, stderr, …}``, an MCP tool's content array), else the result's content; ``error`` the
    result's text when ``is_error``. ``answered`` is False while no result line is written yet.
    """

    tool_use_id: str
    name: str
    input: Any
    output: Any = None
    error: str | None = None
    answered: bool = False


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def tool_calls_since(path: str | Path | None, mark: UsageMark) -> list[TranscriptCall]:
    """The tool calls written to the transcript since ``mark``, in the order the model made them. Malformed
    lines are skipped; no window (see ``usage_since``) gives ``[]``. Never raises."""
    data = _window(path, mark)
    if data is None:
        return []
    calls: dict[str, TranscriptCall] = {}
    for line in data.split(b"\n"):
        # Most lines hold neither; a substring test spares them the parse.
        if b'"tool_use"' not in line and b'"tool_result"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = record.get("message") if isinstance(record, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if (
                block.get("type") == "tool_use"
                and isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
            ):
                calls.setdefault(block["id"], TranscriptCall(block["id"], block["name"], block.get("input")))
            elif block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                known = calls.get(block["tool_use_id"])
                if known is None:
                    continue
                failed = block.get("is_error") is True
                output = record.get("toolUseResult", block.get("content"))
                calls[known.tool_use_id] = TranscriptCall(
                    known.tool_use_id,
                    known.name,
                    known.input,
                    output=None if failed else output,
                    error=_content_text(block.get("content")) if failed else None,
                    answered=True,
                )
    return list(calls.values())


def _fold(data: bytes, seen_ids: frozenset[str]) -> list[ModelUsage]:
    by_message: dict[str, tuple[str, dict[str, int]]] = {}
    totals: dict[str, dict[str, int]] = {}

    def add(model: str, counts: dict[str, int]) -> None:
        acc = totals.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0))
        for name in USAGE_FIELDS:
            acc[name] += counts[name]

    for line in _lines(data):
        parsed = _assistant_usage(line)
        if parsed is None:
            continue
        msg_id, model, counts = parsed
        if msg_id is None:
            add(model, counts)
        elif msg_id not in seen_ids:
            prev = by_message.get(msg_id)
            if prev is None:
                by_message[msg_id] = (model, counts)
            else:
                by_message[msg_id] = (prev[0], {n: max(prev[1][n], counts[n]) for n in USAGE_FIELDS})
    for model, counts in by_message.values():
        add(model, counts)
    return [ModelUsage(model=model, **counts) for model, counts in sorted(totals.items()) if any(counts.values())]


def session_cost_usd(usages: list[ModelUsage]) -> tuple[float, bool]:
    """The priced cost of a delta, and whether every token of it was priced."""
    return total_cost_usd((u.model, u.as_usage()) for u in usages)
