"""The scenario tools of the ``bir`` MCP server (spec §16.5): each one runs this package's own ``bir … --json``.

``scenario_show``, ``scenario_edits`` and ``investigate`` only read; ``scenario_check``, ``scenario_edit``
and ``scenario_undo`` change a scenario (``bir-scenario`` decides which are listed and allowed). A call
becomes one ``bir`` process: logic bodies go through temporary files (0600, in a 0700 folder under
``<BIR_HOME>/tmp/scenario-tools/``), never through the command line; its answer is capped at
``BIR_SCENARIO_MAX_OUTPUT_CHARS``; a reading call gives up after ``BIR_READ_TIMEOUT_MS`` + 10 s and a
changing one after 120 s. A call that is cancelled or times out has its ``bir`` (and its process group)
killed; its files are removed on every path.

A ``bir`` exit of 0 is the answer; 1 (refused, not found, a service error) and 2 (usage) come back as
an MCP error result carrying what ``bir`` printed: the service's report, then its words.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process

from bir.core import config
from bir.core.home_files import open_private, private_dir
from bir.core.log import log_event
from bir.core.truncate import cut_counted

READ_TOOLS: Final = ("scenario_show", "scenario_edits", "investigate")
CHANGE_TOOLS: Final = ("scenario_check", "scenario_edit", "scenario_undo")
CHANGE_TIMEOUT_S: Final = 120.0
READ_GRACE_S: Final = 10.0
KILL_WAIT_S: Final = 5.0
# What is read of a process's output beyond the cap is drained and dropped, so the child never blocks.
_READ_CHUNK: Final = 65_536

NOTHING_TO_READ: Final = "bir is off on this machine: there is nothing to read."
OFF_REFUSED: Final = "bir is off on this machine: no scenario can be changed (`bir on` turns it back on)."
EDITING_OFF: Final = (
    "Scenario editing is off in this project: the scenario's owner turns it on with `bir scenario editing on`."
)

_TARGET: Final = {"type": "string", "description": "a run_ id (its whole-run scenario) or a scn_ id"}
_STEP: Final = {"type": "integer", "minimum": 0, "description": "the step's index"}
_LOGIC: Final = "new {} (JavaScript body), checked against the recording"
_CHANGE_PROPS: Final = {
    "target": _TARGET,
    "step": _STEP,
    "inputLogic": {"type": "string", "description": _LOGIC.format("toolInputLogic")},
    "outputLogic": {"type": "string", "description": _LOGIC.format("toolOutputLogic")},
    "unfreeze": {"type": "boolean", "description": "lift a mark made by hand"},
}


def _schema(props: Mapping[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(props), "required": list(required), "additionalProperties": False}


DEFINITIONS: Final = {
    "scenario_show": (
        "Show a BaseIn scenario (intent, parameters, steps, logic) by run_ or scn_ id; with step, one step "
        "with scenarioId and chainRevision first. Reads only.",
        _schema({"target": _TARGET, "step": _STEP}, ("target",)),
    ),
    "scenario_edits": (
        "A BaseIn scenario's edit history, newest first. Reads only.",
        _schema({"target": _TARGET}, ("target",)),
    ),
    "investigate": (
        "A scenario's state, its marked steps and every save or undo forced past the check (even one taken back). "
        "Reads only.",
        _schema({"id": _TARGET}, ("id",)),
    ),
    "scenario_check": (
        "Try a change to one step of a scenario against its recording. Writes nothing.",
        _schema(_CHANGE_PROPS, ("target", "step")),
    ),
    "scenario_edit": (
        "Check a change to one step against the recording, then save it. A change with problems is saved "
        "only with force and a note saying why.",
        _schema(
            {
                **_CHANGE_PROPS,
                "freeze": {"type": "boolean", "description": "mark the step by hand"},
                "force": {"type": "boolean", "description": "save although the check has problems (needs note)"},
                "note": {"type": "string", "description": "why"},
                "revision": {"type": "integer", "description": "the chainRevision the change was made against"},
            },
            ("target", "step"),
        ),
    ),
    "scenario_undo": (
        "Take back the newest edit of a scenario (of one step with step), or one edit by its sedit_ id.",
        _schema(
            {
                "target": _TARGET,
                "edit": {"type": "string", "description": "the sedit_ id to take back"},
                "step": _STEP,
                "force": {"type": "boolean", "description": "undo although it breaks later steps (needs note)"},
                "note": {"type": "string", "description": "why"},
            },
            ("target",),
        ),
    ),
}


def tool_definitions(names: tuple[str, ...]) -> list[types.Tool]:
    """The MCP definitions of ``names``, in that order."""
    return [
        types.Tool(name=name, description=DEFINITIONS[name][0], input_schema=DEFINITIONS[name][1]) for name in names
    ]


class ToolInputError(ValueError):
    """The host's arguments cannot make a ``bir`` command; the message says which."""


@dataclass(frozen=True)
class ToolSettings:
    """What a scenario tool call needs, read once at start."""

    max_chars: int
    read_timeout_s: float
    tmp_root: Path

    @classmethod
    def of(cls, settings: config.Settings) -> ToolSettings:
        """The part of ``settings`` a scenario tool call uses."""
        return cls(
            max_chars=settings.scenario_max_output_chars,
            read_timeout_s=settings.read_timeout_ms / 1000 + READ_GRACE_S,
            tmp_root=settings.home / "tmp" / "scenario-tools",
        )


def find_bir() -> str | None:
    """This package's own ``bir``: beside the running interpreter, else on ``PATH``."""
    beside = Path(sys.executable).parent / "bir"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("bir")


def _text(arguments: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise ToolInputError(f"{name} must be a non-empty string")
    return value


def _int(arguments: Mapping[str, Any], name: str, *, required: bool = False) -> int | None:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolInputError(f"{name} must be a whole number of at least 0")
    return value


def _flag(arguments: Mapping[str, Any], name: str) -> bool:
    value = arguments.get(name, False)
    if not isinstance(value, bool):
        raise ToolInputError(f"{name} must be true or false")
    return value


@dataclass(frozen=True)
class Command:
    """The ``bir`` arguments of one call, and the bodies that go to files (flag → text)."""

    argv: tuple[str, ...]
    files: Mapping[str, str]
    reading: bool


def command_for(name: str, arguments: Mapping[str, Any]) -> Command:
    """The ``bir … --json`` a tool call runs.

    Raises:
        ToolInputError: an argument is missing or of the wrong type.
    """
    if name == "investigate":
        return Command(("investigate", str(_text(arguments, "id", required=True)), "--json"), {}, reading=True)
    target = str(_text(arguments, "target", required=True))
    if name == "scenario_show":
        step = _int(arguments, "step")
        extra = () if step is None else ("--step", str(step))
        return Command(("scenario", "show", target, *extra, "--json"), {}, reading=True)
    if name == "scenario_edits":
        return Command(("scenario", "edits", target, "--json"), {}, reading=True)
    if name == "scenario_undo":
        return _undo(target, arguments)
    if name in ("scenario_check", "scenario_edit"):
        return _change(name, target, arguments)
    raise ToolInputError(f"unknown tool {name[:100]}")


def _undo(target: str, arguments: Mapping[str, Any]) -> Command:
    argv = ["scenario", "undo", target]
    edit, step = _text(arguments, "edit"), _int(arguments, "step")
    if edit is not None and step is not None:
        raise ToolInputError("give edit or step, not both")
    if edit is not None:
        argv += ["--edit", edit]
    if step is not None:
        argv += ["--step", str(step)]
    argv += _force_and_note(arguments)
    return Command((*argv, "--json"), {}, reading=False)


def _force_and_note(arguments: Mapping[str, Any]) -> list[str]:
    argv = ["--force"] if _flag(arguments, "force") else []
    note = arguments.get("note")
    if note is not None:
        if not isinstance(note, str) or len(note) > 2000:
            raise ToolInputError("note must be a string of at most 2000 characters")
        argv += ["--note", note]
    return argv


def _change(name: str, target: str, arguments: Mapping[str, Any]) -> Command:
    argv = ["scenario", "check" if name == "scenario_check" else "edit", target]
    argv += ["--step", str(_int(arguments, "step", required=True))]
    files: dict[str, str] = {}
    for key, flag in (("inputLogic", "--input-logic"), ("outputLogic", "--output-logic")):
        value = arguments.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ToolInputError(f"{key} must be a string")
        files[flag] = value
    if _flag(arguments, "unfreeze"):
        argv.append("--unfreeze")
    if name == "scenario_edit":
        if _flag(arguments, "freeze"):
            argv.append("--freeze")
        revision = _int(arguments, "revision")
        if revision is not None:
            argv += ["--revision", str(revision)]
        argv += _force_and_note(arguments)
    return Command((*argv, "--json"), files, reading=False)


def _marker(cut_chars: int) -> str:
    return f"\n…[{cut_chars} more characters cut]"


@dataclass(frozen=True)
class ToolAnswer:
    text: str
    is_error: bool


async def run_tool(name: str, arguments: Mapping[str, Any], settings: ToolSettings, *, cwd: Path) -> ToolAnswer:
    """Run one scenario tool call as ``bir … --json``; never raises but for cancellation."""
    try:
        command = command_for(name, arguments)
    except ToolInputError as exc:
        return ToolAnswer(f"Bad arguments for {name}: {exc}", True)
    bir = find_bir()
    if bir is None:
        return ToolAnswer("The bir command was not found beside this server or on PATH.", True)
    timeout_s = settings.read_timeout_s if command.reading else CHANGE_TIMEOUT_S
    answer = await _run(name, bir, command, settings, cwd=cwd, timeout_s=timeout_s)
    return ToolAnswer(cut_counted(answer.text, settings.max_chars, _marker), answer.is_error)


async def _run(
    name: str, bir: str, command: Command, settings: ToolSettings, *, cwd: Path, timeout_s: float
) -> ToolAnswer:
    private_dir(settings.tmp_root.parent, settings.tmp_root.name)
    folder = Path(tempfile.mkdtemp(prefix="call-", dir=settings.tmp_root))
    try:
        argv = [bir, *command.argv]
        for flag, body in command.files.items():
            path = folder / f"{flag.strip('-')}.js"
            fd = open_private(path, "new")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(body)
            argv[-1:-1] = [flag, str(path)]
        return await _spawn(name, argv, settings, cwd=cwd, timeout_s=timeout_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _spawn(name: str, argv: list[str], settings: ToolSettings, *, cwd: Path, timeout_s: float) -> ToolAnswer:
    process = await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, cwd=cwd, env=dict(os.environ), start_new_session=True
    )
    log_event("scenario.tool_started", tool=name, pid=process.pid)
    cap = settings.max_chars * 4 + 1024
    out, err = bytearray(), bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None
                assert process.stderr is not None
                tg.start_soon(_collect, process.stdout, out, cap)
                tg.start_soon(_collect, process.stderr, err, cap)
            code = await process.wait()
    except TimeoutError:
        await _kill(process)
        log_event("scenario.tool_answered", tool=name, kind="timeout", pid=process.pid)
        return ToolAnswer(f"bir did not answer within {timeout_s:g} s; nothing more is known.", True)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _kill(process)
        log_event("scenario.tool_answered", tool=name, kind="cancelled", pid=process.pid)
        raise
    log_event("scenario.tool_answered", tool=name, kind="exit", code=code, chars=len(out))
    stdout = out.decode("utf-8", "replace").strip()
    stderr = err.decode("utf-8", "replace").strip()
    if code == 0:
        return ToolAnswer(stdout or stderr, False)
    return ToolAnswer("\n\n".join(part for part in (stdout, stderr) if part) or f"bir exited with {code}", True)


async def _collect(stream: ByteReceiveStream, into: bytearray, cap: int) -> None:
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while True:
            chunk = await stream.receive(_READ_CHUNK)
            if len(into) < cap:
                into += chunk[: cap - len(into)]


async def _kill(process: Process) -> None:
    """SIGKILL ``bir`` and its process group, and reap it (bounded)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with anyio.move_on_after(KILL_WAIT_S):
        await process.wait()
