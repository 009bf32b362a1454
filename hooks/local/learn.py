"""``bir learn``: a project's past Claude Code sessions imported into the local store as recorded runs, and
their scenarios calculated (issue 19 item 1).

Claude Code keeps every session of a project as a transcript, ``<config>/projects/<folder>/<session>.jsonl``,
where ``<config>`` is ``$CLAUDE_CONFIG_DIR`` or ``~/.claude`` and ``<folder>`` is the project's absolute
path with every character that is not a letter or a digit replaced by ``-`` (FACTS.md §5; seen on the
2.1.197 and 2.1.332 binaries). Each prompt turn becomes one run with ``origin = "transcript"``: its steps
are the turn's tool calls in the shapes the live recorder writes (``bir.core.recording``; an MCP call's
output as its ``CallToolResult``), redacted and capped the same way; its finish carries the turn's last
answer, its usage per model (side chains' included) and their priced cost.

What is not learned, on purpose: a turn bir already has (recorded live, or imported before: the same
``sessionId`` and ``promptId``), a turn bir replayed (its directive or ``run_scenario`` is in it), a turn
with no tool call, a turn still being written. Each is counted with its reason.

Incremental and bounded: a transcript's read offset is stored with the runs it gave, in one transaction,
so an interrupted learn resumes where it stopped and nothing is imported twice; a grown transcript is
read from its offset, a shortened or replaced one again from the start (run ids are derived from the
session and prompt ids, so re-reading adds nothing). One learn reads at most ``MAX_TOTAL_BYTES`` (a read
is cut at what is left of it) and stops starting new work after its time budget; either way its report
says ``stopped`` with which, and what it did not reach, the next one does.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from anyio import to_thread

from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event
from bir.core.pricing import PRICING_VERSION
from bir.core.recording import finish_body, step_body
from bir.core.redact import redact_text
from bir.core.tool_output import step_output_text
from bir.core.transcript import ModelUsage, session_cost_usd
from bir.hooks.local.store import ImportedRun
from bir.hooks.local.transcripts import Call, Reading, Turn, read_turns, sidechain_usage

if TYPE_CHECKING:
    from bir.hooks.local.runtime import LocalService


def support_of(template: Mapping[str, Any]) -> int:
    from bir.hooks.local.runtime import support_of as of

    return of(template)


MAX_CHUNK_BYTES: Final = 64 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 2 * 1024 * 1024 * 1024
MAX_SUBAGENT_BYTES: Final = 16 * 1024 * 1024
MAX_PROMPT_CHARS: Final = 20_000
DEFAULT_BUDGET_S: Final = 120.0
# A transcript unchanged this long is done: its last turn is taken even if it never ended cleanly.
IDLE_S: Final = 3600.0
# Claude Code shortens a project folder's name past this length (then the folder is found by its sessions' cwd).
_FOLDER_NAME_MAX: Final = 200
_NOT_ALNUM: Final = re.compile(r"[^A-Za-z0-9]")

Progress = Callable[[str], None]
Clock = Callable[[], float]


def claude_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Claude Code keeps its state: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    environ = os.environ if env is None else env
    configured = environ.get("CLAUDE_CONFIG_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".claude"


def folder_name(project: Path) -> str:
    """The transcript folder's name for a project: its absolute path, every non-alphanumeric character ``-``."""
    return _NOT_ALNUM.sub("-", str(project))


def transcript_folder(project: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """The folder holding ``project``'s transcripts, or None when Claude Code never ran there."""
    projects = claude_config_dir(env) / "projects"
    exact = projects / folder_name(project)
    if exact.is_dir():
        return exact
    name = folder_name(project)
    if len(name) <= _FOLDER_NAME_MAX or not projects.is_dir():
        return None
    # A long path is shortened with a suffix of its own: the folder whose sessions ran in the project.
    for candidate in sorted(projects.glob(name[:_FOLDER_NAME_MAX] + "*")):
        if candidate.is_dir() and _cwd_of(candidate) == str(project):
            return candidate
    return None


def _cwd_of(folder: Path) -> str | None:
    for path in sorted(folder.glob("*.jsonl"))[:3]:
        try:
            with path.open("rb") as handle:
                head = handle.read(256 * 1024)
        except OSError:
            continue
        for turn in read_turns(head, 0, at_eof=True, idle=True).turns:
            if turn.cwd:
                return turn.cwd
    return None


def transcripts_in(folder: Path) -> list[Path]:
    """The folder's session transcripts, oldest first (subagents' files are read with their session)."""
    found = []
    for path in folder.glob("*.jsonl"):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [p for _, p in sorted(found)]


# --- a turn as a run ------------------------------------------------------------------------------


def run_id_of(session_id: str, prompt_id: str | None, offset: int) -> str:
    """A turn's run id, the same every time the turn is read."""
    key = f"{session_id}\0{prompt_id or offset}".encode()
    return "run_t" + hashlib.sha256(key).hexdigest()[:24]


def _step(index: int, call: Call) -> dict[str, Any]:
    error = call.error
    if not call.answered:
        error = "no result in the transcript (the call was interrupted or never ran)"
    value: object = call.result if call.answered else {"error": error}
    return step_body(
        index,
        call.name,
        call.input,
        tool_output=step_output_text(call.name, value),
        error=error,
        duration_ms=call.duration_ms,
    )


def _usages(turn: Turn) -> list[ModelUsage]:
    return [ModelUsage(model=model, **counts) for model, counts in turn.usage_by_model().items()]


def run_of(turn: Turn, project: str, transcript: Path) -> ImportedRun:
    """The run ``turn`` records: its steps (bir's own calls never), its finish with usage and cost."""
    steps = [_step(i, c) for i, c in enumerate(c for c in turn.calls if not is_housekeeping(c.name, c.input))]
    usages = _usages(turn)
    cost, priced = session_cost_usd(usages)
    started = turn.started if turn.started is not None else 0.0
    ended = turn.ended if turn.ended is not None else started
    finish = finish_body(
        turn.answer,
        duration_ms=round((ended - started) * 1000),
        usage=usages,
        cost_usd=cost,
        measured=priced and bool(usages),
        pricing_version=PRICING_VERSION,
    )
    metadata = {
        "cwd": turn.cwd,
        "sessionId": turn.session_id,
        "promptId": turn.prompt_id,
        "transcript": str(transcript),
        "claudeCode": turn.version,
        "subagents": turn.subagents,
    }
    return ImportedRun(
        id=run_id_of(turn.session_id, turn.prompt_id, turn.start_offset),
        project=project,
        input=redact_text(turn.prompt)[:MAX_PROMPT_CHARS],
        metadata=metadata,
        created_at=started,
        finished_at=ended,
        steps=steps,
        finish=finish,
    )


def why_not(turn: Turn, known: set[tuple[str, str]], since: float | None) -> str | None:
    """Why ``turn`` is not learned, or None when it is."""
    if since is not None and (turn.started is None or turn.started < since):
        return "before --since"
    if turn.prompt_id is not None and (turn.session_id, turn.prompt_id) in known:
        return "already in the store"
    if turn.replayed:
        return "replayed by bir"
    if not any(not is_housekeeping(c.name, c.input) for c in turn.calls):
        return "no tool calls"
    return None


# --- the report -----------------------------------------------------------------------------------


def reason_class(reason: Mapping[str, Any] | None) -> str:
    """A not-ready scenario's reason, as the group ``bir learn`` counts it under."""
    message = str((reason or {}).get("message", "")).lower()
    rules = (
        ("selector ambiguity", "which row was meant is ambiguous (a second run would say)"),
        ("looks like the prompt's", "a value looks transformed from the prompt"),
        ("no rule explains", "a row no rule explains"),
        ("which was left out", "a value comes from a left-out step"),
        ("redacted", "a value was a redacted secret"),
        ("capped text", "an input was too large to record"),
        ("no step of this run can be replayed", "nothing to replay (every step left out)"),
        ("other arguments than were recorded", "the self-check did not reproduce the recording"),
        ("self-check stopped", "the self-check failed"),
        ("sandbox", "the sandbox was unavailable"),
        ("did not agree", "its runs disagree"),
    )
    for needle, label in rules:
        if needle in message:
            return label
    return "other"


@dataclass
class LearnReport:
    """What one ``bir learn`` did; ``wire()`` is its ``--json``."""

    project: str
    folder: str | None
    dry: bool
    transcripts: int = 0
    bytes_read: int = 0
    turns: int = 0
    imported: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    calculated: int = 0
    ready: int = 0
    not_ready: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stopped: str | None = None

    def skip(self, why: str, n: int = 1) -> None:
        if n > 0:
            self.skipped[why] = self.skipped.get(why, 0) + n

    def wire(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "folder": self.folder,
            "dry": self.dry,
            "transcripts": self.transcripts,
            "bytesRead": self.bytes_read,
            "turns": self.turns,
            "imported": self.imported,
            "skipped": dict(sorted(self.skipped.items())),
            "calculated": self.calculated,
            "ready": self.ready,
            "notReady": dict(sorted(self.not_ready.items(), key=lambda kv: -kv[1])),
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
        }


# --- the learn ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chunk:
    reading: Reading
    size: int
    mtime: float
    at_eof: bool
    read: int


def _read_chunk(path: Path, offset: int, left: int) -> _Chunk:
    """At most ``left`` bytes of ``path`` from ``offset``.

    Raises: OSError."""
    st = path.stat()
    start = 0 if st.st_size < offset else offset
    length = min(st.st_size - start, MAX_CHUNK_BYTES, max(left, 0))
    with path.open("rb") as handle:
        handle.seek(start)
        data = handle.read(length)
    at_eof = start + len(data) >= st.st_size
    idle = at_eof and time.time() - st.st_mtime > IDLE_S
    reading = read_turns(data, start, at_eof=at_eof, idle=idle)
    if not reading.turns and reading.resume_at == start and len(data) == MAX_CHUNK_BYTES:
        # One turn longer than a whole chunk: passed over, so the transcript is not stuck on it.
        reading = Reading([], start + len(data), reading.incomplete, reading.unreadable_lines)
    return _Chunk(reading, st.st_size, st.st_mtime, at_eof, len(data))


def _subagent_usage(path: Path) -> dict[str, dict[str, tuple[str, dict[str, int]]]]:
    found: dict[str, dict[str, tuple[str, dict[str, int]]]] = {}
    folder = path.with_suffix("") / "subagents"
    if not folder.is_dir():
        return found
    for file in sorted(folder.glob("*.jsonl")):
        try:
            with file.open("rb") as handle:
                data = handle.read(MAX_SUBAGENT_BYTES)
        except OSError:
            continue
        for prompt_id, messages in sidechain_usage(data).items():
            found.setdefault(prompt_id, {}).update(messages)
    return found


def _learn_file(
    path: Path,
    *,
    store: Any,
    project: str,
    known: set[tuple[str, str]],
    since: float | None,
    dry: bool,
    report: LearnReport,
    deadline: float,
    budget_bytes: list[int],
    clock: Clock,
) -> list[str]:
    """Import what ``path`` holds past its offset; returns the ids of the runs added (blocking)."""
    done = None if dry else store.transcript_read(str(path))
    offset = 0
    if done is not None:
        offset = done[0]
        try:
            st = path.stat()
        except OSError:
            return []
        if st.st_size == offset and st.st_mtime == done[1]:
            return []
    added: list[str] = []
    subagents: dict[str, dict[str, tuple[str, dict[str, int]]]] | None = None
    # Once --since passed a turn over, this transcript keeps its offset for this learn: a later one may want it.
    passed_over = False
    while True:
        if clock() >= deadline or budget_bytes[0] <= 0:
            # Stopped inside this transcript: the report says so even when it is the last one.
            report.stopped = report.stopped or ("time" if clock() >= deadline else "size")
            break
        try:
            chunk = _read_chunk(path, offset, budget_bytes[0])
        except OSError as exc:
            report.skip("transcript unreadable")
            log_event("learn.transcript_unreadable", path=str(path), error=str(exc)[:300])
            return added
        budget_bytes[0] -= chunk.read
        report.bytes_read += chunk.read
        reading = chunk.reading
        if chunk.at_eof:
            # A turn a read cut short (a chunk's end, the size budget) is read whole by the next read.
            report.skip("still being written", reading.incomplete)
        if reading.unreadable_lines:
            report.skip("lines that could not be read", reading.unreadable_lines)
        runs: list[ImportedRun] = []
        for turn in reading.turns:
            report.turns += 1
            why = why_not(turn, known, since)
            if why is not None:
                passed_over = passed_over or why == "before --since"
                report.skip(why)
                continue
            if turn.subagents:
                if subagents is None:
                    subagents = _subagent_usage(path)
                for key, (model, counts) in (subagents.get(turn.prompt_id or "") or {}).items():
                    turn.add_usage(key, model, counts)
            runs.append(run_of(turn, project, path))
            if turn.prompt_id is not None:
                known.add((turn.session_id, turn.prompt_id))
        if dry:
            report.imported += len(runs)
        else:
            moved = (done[0] if done is not None else 0) if passed_over else reading.resume_at
            added += store.import_runs(runs, transcript=str(path), project=project, read_bytes=moved, mtime=chunk.mtime)
            report.imported += len(runs)
        if chunk.at_eof:
            break
        if reading.resume_at <= offset:
            # No whole turn in what the size budget left: the next learn reads on from here.
            if budget_bytes[0] <= 0:
                report.stopped = report.stopped or "size"
            break
        offset = reading.resume_at
    return added


async def learn(
    service: LocalService,
    project: Path,
    *,
    since: float | None = None,
    dry: bool = False,
    budget_s: float | None = None,
    budget_bytes: int | None = None,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    clock: Clock = time.monotonic,
) -> LearnReport:
    """Learn ``project``'s past turns into ``service``'s store and calculate their scenarios, within
    ``budget_s`` seconds by ``clock`` (``DEFAULT_BUDGET_S``) and ``budget_bytes`` of transcript read
    (``MAX_TOTAL_BYTES``).

    Raises:
        StoreError: the store cannot be written.
    """
    began = clock()
    deadline = began + (DEFAULT_BUDGET_S if budget_s is None else budget_s)
    key = service.project or str(project)
    folder = transcript_folder(project, env)
    report = LearnReport(project=key, folder=None if folder is None else str(folder), dry=dry)
    store = service.store
    files = transcripts_in(folder) if folder is not None else []
    report.transcripts = len(files)
    known = await to_thread.run_sync(lambda: store.prompt_keys(key))
    left = [MAX_TOTAL_BYTES if budget_bytes is None else budget_bytes]
    for n, path in enumerate(files, 1):
        if report.stopped is not None:
            break
        await to_thread.run_sync(
            lambda path=path: _learn_file(  # type: ignore[misc]
                path,
                store=store,
                project=key,
                known=known,
                since=since,
                dry=dry,
                report=report,
                deadline=deadline,
                budget_bytes=left,
                clock=clock,
            )
        )
        if progress is not None:
            progress(f"reading transcripts: {n}/{len(files)}, {report.imported} turns learned")
    if not dry:
        await _calculate_pending(service, key, report, deadline=deadline, progress=progress, clock=clock)
    report.seconds = clock() - began
    log_event("learn.done", **{k: v for k, v in report.wire().items() if k not in ("skipped", "notReady")})
    return report


async def _calculate_pending(
    service: LocalService,
    project: str,
    report: LearnReport,
    *,
    deadline: float,
    progress: Progress | None,
    clock: Clock,
) -> None:
    store = service.store
    pending: Sequence[str] = await to_thread.run_sync(lambda: store.uncalculated_runs(project))
    touched: set[str] = set()
    for n, run_id in enumerate(pending, 1):
        if clock() >= deadline:
            report.stopped = report.stopped or "time"
            break
        settled = await service.settle_run(run_id)
        report.calculated += 1
        if settled.scenario is not None:
            touched.add(settled.scenario.id)
        if progress is not None and (n % 10 == 0 or n == len(pending)):
            progress(f"calculating scenarios: {n}/{len(pending)}")
    for scenario_id in sorted(touched):
        row = await to_thread.run_sync(lambda scenario_id=scenario_id: store.scenario(scenario_id))  # type: ignore[misc]
        if row is None:
            continue
        waiting = row.state == "ready" and support_of(row.template or {}) < service.min_runs
        if row.state == "ready" and not waiting:
            report.ready += 1
        elif waiting:
            label = f"ready, waiting for {service.min_runs} agreeing runs (BIR_LOCAL_MIN_RUNS)"
            report.not_ready[label] = report.not_ready.get(label, 0) + 1
        else:
            label = reason_class(row.reason)
            report.not_ready[label] = report.not_ready.get(label, 0) + 1
