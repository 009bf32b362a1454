"""The whole session: what bir's hooks add to each tool call of a real Claude Code session.

One scripted session of N ``Bash true`` calls (the fake Messages API of ``bir.benchmarks.fake_model``
answers each request with the next call) runs six ways in a temporary project: with no hooks, with two
bare ``python3 -S`` command hooks (PreToolUse and PostToolUse, printing ``{}``), with two ``mcp_tool``
hooks on a stdio MCP server answering ``{}`` (``bir.benchmarks.empty_hook_server``: what Claude Code
itself spends on such a hook), and with bir's hooks as ``bir install`` writes them by default (the tool
events as ``mcp_tool`` hooks answered in ``bir-scenario``), with ``--replay``, and with
``--command-hooks`` (a ``bir-hook`` process per tool event, the default before), the project's control
server running for each. A tool call's time is the gap
between two consecutive model requests as the fake receives them (the model's answer, the PreToolUse
hook, the tool, the PostToolUse hook, the next request): the session's start and end (SessionStart,
the prompt, Stop) fall outside it. The first gap of a session is left out (its host warms up).

Measured only when a Claude Code binary is at hand: ``bir bench pin --claude PATH``, else ``claude`` on
``PATH``, else the test peers that ``tests/peers.py`` installs into ``<checkout>/.peers/``. Otherwise the
report says so and nothing is invented.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import psutil

from bir.benchmarks import empty_hook_server
from bir.benchmarks.claude_host import claude_env, command_hook
from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, Step, Turn, call
from bir.benchmarks.stats import percentile
from bir.hooks.hook_client import read_server

VARIANTS: Final = ("no_hooks", "python_hooks", "mcp_hooks", "bir_default", "bir_replay", "bir_command_hooks")
# The variants with bir installed, and the options ``bir install`` gets for each.
BIR_VARIANTS: Final = {"bir_default": (), "bir_replay": ("--replay",), "bir_command_hooks": ("--command-hooks",)}
# The Pre/PostToolUse hook events an ``mcp_tool`` hook variant answers.
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse")
SESSION_TIMEOUT_S: Final = 120.0
SERVER_START_S: Final = 30.0
SERVER_STOP_S: Final = 20.0
POLL_S: Final = 0.05
# The server counts as settled once it and its workers used less than this CPU time over one window.
IDLE_CPU_S: Final = 0.01
IDLE_WINDOW_S: Final = 0.25
MAX_ERROR_CHARS: Final = 600
NOT_AT_HAND: Final = (
    "not measured: no Claude Code binary at hand (give one with --claude PATH, or put `claude` on PATH)"
)


class SessionBenchError(Exception):
    """A session could not be measured: claude failed, or the control server did not start."""


def find_claude_binary(root: Path | None = None, path: str | None = None) -> Path | None:
    """``claude`` on ``path`` (default: ``PATH``), else the newest Claude Code binary the test peers installed
    under ``root/.peers`` (default: this checkout's)."""
    on_path = shutil.which("claude", path=path)
    if on_path is not None:
        return Path(on_path)
    base = (root if root is not None else Path(__file__).resolve().parents[1]) / ".peers"
    found: list[tuple[tuple[int, ...], Path]] = []
    for binary in base.glob("claude-code-*/node_modules/@anthropic-ai/claude-code-linux-*/claude"):
        version = re.fullmatch(r"claude-code-(\d+(?:\.\d+)*)", binary.parents[3].name)
        if version is not None and os.access(binary, os.X_OK):
            found.append((tuple(int(x) for x in version.group(1).split(".")), binary))
    return max(found)[1] if found else None


def _script(calls: int, arrivals: list[float]) -> list[Step]:
    """``calls`` turns of ``Bash true``, each noting when its request arrived (then the final text turn)."""

    def turn(_request: ApiRequest) -> Turn:
        arrivals.append(time.monotonic())
        return call("Bash", {"command": "true", "description": "bench"})

    def last(_request: ApiRequest) -> Turn:
        arrivals.append(time.monotonic())
        return Turn(text="Done.")

    steps: list[Step] = [turn] * calls
    return [*steps, last]


def _settings(variant: str) -> dict[str, Any]:
    if variant == "python_hooks":
        bare = command_hook(f"{sys.executable} -S -c 'print(\"{{}}\")'", timeout_s=30)
        return {"hooks": {event: [{**bare, "matcher": "*"}] for event in TOOL_EVENTS}}
    if variant == "mcp_hooks":
        hook: dict[str, Any] = {"type": "mcp_tool", "server": empty_hook_server.SERVER_NAME}
        hook["tool"] = empty_hook_server.TOOL_NAME
        # The arguments bir's own hook tool takes, so Claude Code interpolates as much as it would for bir.
        hook["input"] = {"event": "${hook_event_name}", "tool_input": "${tool_input}", "id": "${tool_use_id}"}
        return {"hooks": {event: [{"matcher": "*", "hooks": [{**hook, "timeout": 30}]}] for event in TOOL_EVENTS}}
    return {}


def _mcp_config(variant: str) -> dict[str, Any]:
    """The ``--mcp-config`` of a variant: the empty hook server for ``mcp_hooks``, else none."""
    if variant != "mcp_hooks":
        return {"mcpServers": {}}
    server = {"type": "stdio", "command": sys.executable, "args": ["-m", "bir.benchmarks.empty_hook_server"]}
    return {"mcpServers": {empty_hook_server.SERVER_NAME: server}}


@contextlib.contextmanager
def _control_server(project: Path, env: dict[str, str], home: Path) -> Iterator[None]:
    """The project's control server, as ``bir-hooks`` runs it for an installed project, for the block.

    Raises:
        SessionBenchError: it did not announce itself in time.
    """
    command = [str(Path(sys.executable).parent / "bir-hooks"), "--project", str(project)]
    if not Path(command[0]).exists():
        command = [sys.executable, "-m", "bir.hooks", "--project", str(project)]
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + SERVER_START_S
        while read_server(home, project) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SessionBenchError(f"the control server did not start (exit {process.poll()})")
            time.sleep(POLL_S)
        _wait_idle(process.pid, deadline)
        yield
    finally:
        process.terminate()
        try:
            process.wait(SERVER_STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_idle(pid: int, deadline: float) -> None:
    """Wait until the server and its workers stop using the CPU (its evaluator pool starting), so the
    session meets a server that has been running a while, as a user's does; bounded by ``deadline``."""
    try:
        server = psutil.Process(pid)
        last = -1.0
        while time.monotonic() < deadline:
            spent = sum(sum(p.cpu_times()[:2]) for p in [server, *server.children(recursive=True)])
            if last >= 0 and spent - last < IDLE_CPU_S:
                return
            last = spent
            time.sleep(IDLE_WINDOW_S)
    except psutil.Error:
        return


def run_session(binary: Path, variant: str, calls: int, case: Path) -> list[float]:
    """One session of ``calls`` tool calls in a fresh project under ``case``; the gaps (s) between its
    consecutive model requests, the first left out.

    Raises:
        SessionBenchError: claude failed or timed out, or did not make every call.
    """
    project, home, tmp, bir_home = case / "project", case / "home", case / "tmp", case / "bir-home"
    for folder in (project / ".claude", home, tmp, bir_home):
        folder.mkdir(parents=True, exist_ok=True)
    (project / ".claude" / "settings.local.json").write_text(json.dumps(_settings(variant)), encoding="utf-8")
    plain = {k: v for k, v in os.environ.items() if not k.startswith("BIR_")}
    bir_env = {**plain, "HOME": str(home), "BIR_HOME": str(bir_home)}
    arrivals: list[float] = []
    api = FakeMessagesApi(list(_script(calls, arrivals)))
    with contextlib.ExitStack() as stack:
        if variant in BIR_VARIANTS:
            bindir = Path(sys.executable).parent
            done = subprocess.run(
                [str(bindir / "bir"), "install", *BIR_VARIANTS[variant], "--project", str(project)],
                env=bir_env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode != 0:
                raise SessionBenchError(f"bir install failed: {done.stderr[-MAX_ERROR_CHARS:]}")
            stack.enter_context(_control_server(project, bir_env, bir_home))
        stack.enter_context(api.serve())
        env = claude_env(home, tmp, api.url, {"BIR_HOME": str(bir_home)})
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        mcp_config = case / "mcp.json"
        mcp_config.write_text(json.dumps(_mcp_config(variant)), encoding="utf-8")
        argv = [str(binary), "-p", "run the checks", "--output-format", "json", "--allowedTools", "Bash"]
        argv += ["--mcp-config", str(mcp_config)]
        _claude(argv, project, env)
    if api.failures or len(arrivals) != calls + 1:
        raise SessionBenchError(
            f"the {variant} session made {len(arrivals) - 1} of {calls} tool calls (failures: {api.failures[:1]!r})"
        )
    return [b - a for a, b in itertools.pairwise(arrivals[1:])]


def _claude(argv: Sequence[str], project: Path, env: dict[str, str]) -> None:
    """Run ``claude -p`` to its end; its process group goes with it, whatever happens.

    Raises:
        SessionBenchError: it exited non-zero or timed out.
    """
    process = subprocess.Popen(
        argv,
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=SESSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SessionBenchError(f"claude did not finish within {SESSION_TIMEOUT_S:g} s") from None
    finally:
        # Whatever the session left in its group (a hook still running) ends with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.returncode != 0:
        tail = (err or out).decode("utf-8", "replace")[-MAX_ERROR_CHARS:]
        raise SessionBenchError(f"claude exited {process.returncode}: {tail}")


def measure_sessions(binary: Path | None, *, calls: int, rounds: int) -> dict[str, Any]:
    """``rounds`` sessions of each variant, taken in turn; per variant the tool call's p50/p90 (ms), and
    what each variant's hooks add per call over no hooks. ``measured`` False with the reason
    when no binary is at hand.

    Raises:
        SessionBenchError: a session could not be measured.
    """
    if binary is None:
        return {"measured": False, "why": NOT_AT_HAND}
    gaps: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    root = Path(tempfile.mkdtemp(prefix="bir-bench-session-"))
    try:
        for i in range(rounds):
            for variant in VARIANTS:
                gaps[variant] += run_session(binary, variant, calls, root / f"{variant}-{i}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {variant: _per_call(samples) for variant, samples in gaps.items()}
    none = figures["no_hooks"]["p50_ms"]
    added = {variant: round(figures[variant]["p50_ms"] - none, 1) for variant in VARIANTS[1:]}
    # A tool call's time under each variant over its time with no hooks, p50 (1.0: it costs nothing).
    versus = {variant: round(figures[variant]["p50_ms"] / none, 2) if none > 0 else None for variant in VARIANTS[1:]}
    return {
        "measured": True,
        "claude": str(binary),
        "calls_per_session": calls,
        "rounds": rounds,
        "tool_call": figures,
        "added_per_call_p50_ms": added,
        "vs_no_hooks_p50": versus,
    }


def _per_call(samples_s: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(samples_s)
    return {
        "calls": len(ordered),
        "p50_ms": round(percentile(ordered, 0.5) * 1000, 1),
        "p90_ms": round(percentile(ordered, 0.9) * 1000, 1),
    }
