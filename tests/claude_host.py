"""Run a real Claude Code binary (``claude -p``) offline in a temporary project (FACTS.md §2).

The session sees a clean environment: its HOME, TMPDIR, CLAUDE_CODE_TMPDIR and XDG_RUNTIME_DIR are
folders of the case, the model is the scripted fake at ``api_url``, and nonessential traffic is off
(which alone keeps it from reaching outside; no network namespace is needed, and the fakes live on
loopback in the test process). ``BIR_HOME`` is passed through so that bir's hooks and servers inside
the session use the test's home.

MCP servers connect in the background in ``-p`` mode, so a slow server (a Python one importing the MCP
SDK takes about a second) may miss the first model request. ``MCP_CONNECTION_NONBLOCKING=false`` makes
Claude Code wait for its servers before the first request, for at most ``MCP_CONNECT_TIMEOUT_MS`` (5 s by
default, which a server behind ``bir-proxy`` outlasts on a loaded machine: the environment says 60 s);
``run_claude`` sets both unless told otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bir.benchmarks.claude_host import claude_env

DEFAULT_TIMEOUT_S = 60.0
TAIL_BYTES = 16 * 1024
MAX_STDOUT_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ClaudeRun:
    """What one ``claude -p`` run left behind."""

    exit_code: int
    timed_out: bool
    duration_s: float
    session_id: str
    # ``--output-format json``: the result object; ``stream-json``: the last line (the result event).
    result: dict[str, Any] | None
    # ``stream-json``: every event line; empty for ``json``.
    events: list[dict[str, Any]]
    stdout_tail: str
    stderr_tail: str
    home: Path
    transcript_path: Path

    def transcript(self) -> list[dict[str, Any]]:
        """The transcript's lines (JSONL); empty when there is no file."""
        if not self.transcript_path.exists():
            return []
        lines = self.transcript_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def assistant_usage(self) -> dict[str, dict[str, Any]]:
        """The usage of each assistant message in the transcript, once per ``message.id`` (FACTS.md §5)."""
        usage: dict[str, dict[str, Any]] = {}
        for line in self.transcript():
            message = line.get("message")
            if line.get("type") == "assistant" and isinstance(message, dict) and "usage" in message:
                usage.setdefault(str(message.get("id")), message["usage"])
        return usage

    def describe(self) -> str:
        """A bounded account of the run, for an assertion message."""
        return (
            f"claude exited {self.exit_code} (timed out: {self.timed_out}) after {self.duration_s:.1f}s\n"
            f"result: {json.dumps(self.result)[:2000]}\nstdout tail: {self.stdout_tail[-2000:]}\n"
            f"stderr tail: {self.stderr_tail[-2000:]}"
        )


def mangled(project_dir: Path) -> str:
    """The transcript folder's name for a cwd: every non-alphanumeric character becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(project_dir))


def write_project(
    project_dir: Path,
    *,
    mcp_servers: Mapping[str, Mapping[str, Any]] | None = None,
    settings: Mapping[str, Any] | None = None,
    settings_local: Mapping[str, Any] | None = None,
) -> Path:
    """Create a project folder with ``.mcp.json`` and ``.claude/settings[.local].json`` as given."""
    project_dir.mkdir(parents=True, exist_ok=True)
    if mcp_servers is not None:
        (project_dir / ".mcp.json").write_text(json.dumps({"mcpServers": mcp_servers}, indent=2), encoding="utf-8")
    for name, content in (("settings.json", settings), ("settings.local.json", settings_local)):
        if content is not None:
            (project_dir / ".claude").mkdir(exist_ok=True)
            (project_dir / ".claude" / name).write_text(json.dumps(content, indent=2), encoding="utf-8")
    return project_dir


def claude_home(case_dir: Path) -> Path:
    """The HOME a run in ``case_dir`` gets (``run_claude`` makes it on first use)."""
    return case_dir.resolve() / "claude-home"


def write_local_mcp(case_dir: Path, project_root: Path, servers: Mapping[str, Mapping[str, Any]]) -> Path:
    """Add local-scope MCP servers for ``project_root``, where ``claude mcp add -s local`` puts them.

    That is ``$HOME/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` when set), key
    ``projects[<absolute project root>].mcpServers``; inside a git repository the root is the repository's
    top folder, not the cwd. Returns the file written.
    """
    config = claude_home(case_dir) / ".claude.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    project = data.setdefault("projects", {}).setdefault(str(project_root.resolve()), {})
    project.setdefault("mcpServers", {}).update({name: {"type": "stdio", **dict(s)} for name, s in servers.items()})
    config.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return config


def run_claude(
    binary: Path,
    project_dir: Path,
    prompt: str,
    *,
    api_url: str,
    env_extra: Mapping[str, str] | None = None,
    allowed_tools: Sequence[str] = (),
    session_id: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    output_format: str = "json",
    extra_args: Sequence[str] = (),
    case_dir: Path | None = None,
    resume: bool = False,
) -> ClaudeRun:
    """Run ``claude -p prompt`` in ``project_dir`` and wait for it, killing its process group after ``timeout_s``.

    The case folder (default: ``project_dir``'s parent) gets ``claude-home/`` (HOME), ``claude-tmp/``
    and the run's ``claude-<session>.stdout``/``.stderr``; the tails kept are bounded. ``resume`` with a
    ``session_id`` continues that session (``--resume``): the prompt is its next turn, in its transcript.
    """
    project_dir = project_dir.resolve()
    case = (case_dir or project_dir.parent).resolve()
    home, tmp = claude_home(case), case / "claude-tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    if resume and session_id is None:
        raise ValueError("resume needs the session_id of the session to continue")
    session = session_id or str(uuid.uuid4())
    args = [str(binary), "-p", prompt, "--output-format", output_format, "--resume" if resume else "--session-id"]
    args.append(session)
    if output_format == "stream-json":
        args.append("--verbose")
    if allowed_tools:
        args += ["--allowedTools", ",".join(allowed_tools)]
    args += list(extra_args)
    run_name = f"{session}-{uuid.uuid4().hex[:8]}" if resume else session
    out_path, err_path = case / f"claude-{run_name}.stdout", case / f"claude-{run_name}.stderr"
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            args,
            cwd=project_dir,
            env=claude_env(home, tmp, api_url, env_extra),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,  # one group: a timeout kills claude with its MCP servers and hooks
        )
        timed_out = False
        try:
            exit_code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process.pid)
            exit_code = process.wait()
        finally:
            # Whatever the run left in its group (a stubborn MCP server, a hook) ends with it.
            _kill_group(process.pid)
    duration = time.monotonic() - started
    stdout = _head_and_tail(out_path)
    events = _json_lines(stdout) if output_format == "stream-json" else []
    result = events[-1] if events else _json_object(stdout)
    return ClaudeRun(
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=duration,
        session_id=session,
        result=result,
        events=events,
        stdout_tail=stdout[-TAIL_BYTES:],
        stderr_tail=_tail(err_path),
        home=home,
        transcript_path=home / ".claude" / "projects" / mangled(project_dir) / f"{session}.jsonl",
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _head_and_tail(path: Path) -> str:
    """The file's text, or its last ``MAX_STDOUT_BYTES`` when larger."""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - MAX_STDOUT_BYTES))
        return f.read().decode("utf-8", "replace")


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - TAIL_BYTES))
        return f.read().decode("utf-8", "replace")


def _json_lines(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        parsed = _json_object(line)
        if parsed is not None:
            found.append(parsed)
    return found


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class ClaudeSession:
    """One real ``claude -p --input-format stream-json`` session fed one prompt at a time (FACTS.md §2), so a
    test can run several turns in one session and look at its transcript between them.

    Prompts sent while a turn runs are queued and dropped when input ends, so ``turn`` waits for each
    turn's ``result`` event before the next prompt goes. ``close`` ends input and waits; the whole group is
    killed on the way out whatever happened.
    """

    def __init__(
        self,
        binary: Path,
        project_dir: Path,
        *,
        api_url: str,
        case_dir: Path,
        allowed_tools: Sequence[str] = (),
        env_extra: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.project_dir = project_dir.resolve()
        case = case_dir.resolve()
        self.home, tmp = claude_home(case), case / "claude-tmp"
        self.home.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
        self.session_id = str(uuid.uuid4())
        args = [str(binary), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
        args += ["--session-id", self.session_id]
        if allowed_tools:
            args += ["--allowedTools", ",".join(allowed_tools)]
        args += list(extra_args)
        self._err = (case / f"claude-{self.session_id}.stderr").open("wb")
        self._process = subprocess.Popen(
            args,
            cwd=self.project_dir,
            env=claude_env(self.home, tmp, api_url, env_extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,
        )
        self.results: list[dict[str, Any]] = []
        # A reader thread, so a turn can wait for its result with a deadline.
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for raw in iter(stdout.readline, b""):
            self._lines.put(raw)
        self._lines.put(None)

    @property
    def transcript_path(self) -> Path:
        return self.home / ".claude" / "projects" / mangled(self.project_dir) / f"{self.session_id}.jsonl"

    def turn(self, prompt: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Send ``prompt`` and wait for its turn's ``result`` event.

        Raises:
            AssertionError: the session ended, or the turn did not end within ``timeout_s``.
        """
        stdin = self._process.stdin
        assert stdin is not None
        line = {"type": "user", "message": {"role": "user", "content": prompt}}
        stdin.write((json.dumps(line) + "\n").encode())
        stdin.flush()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                raw = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if raw is None:
                raise AssertionError(f"the claude session ended before {prompt!r} finished")
            event = _json_object(raw.decode("utf-8", "replace"))
            if event is not None and event.get("type") == "result":
                self.results.append(event)
                return event
        raise AssertionError(f"{prompt!r} did not finish within {timeout_s} s")

    def close(self, timeout_s: float = 30.0) -> int:
        """End the session's input and wait for it to exit; answers its exit code."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return -9
        finally:
            _kill_group(self._process.pid)
            self._reader.join(10)
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._err.close()

    def __enter__(self) -> ClaudeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
