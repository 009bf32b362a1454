"""A new user's machine, with the wheel installed: a home of its own, ``BIR_HOME`` in it, and a project
(``~/src/app``) whose ``.mcp.json`` has the demo fleet server, approved in Claude Code's config.

Everything runs the installed console scripts from the wheel's venv (its ``bin`` first on ``PATH``, so
``python`` is that venv's), through a shell where a command line is a person's. ``close`` stops every
control server started under the sandbox's ``BIR_HOME`` and every process left with the sandbox in its
environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.wheel import Installed

COMMAND_TIMEOUT_S = 180.0
STOP_WAIT_S = 20.0


@dataclass
class Sandbox:
    installed: Installed
    root: Path
    home: Path
    bir_home: Path
    project: Path
    env: dict[str, str] = field(default_factory=dict)

    def bir(
        self,
        *args: str,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``bir ARGS…`` to its end."""
        return subprocess.run(
            [str(self.installed.bin / "bir"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=cwd or self.project,
            check=False,
        )

    def shell(
        self, line: str, *, env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run one command line as a person types it (``bash -c``), in the project."""
        return subprocess.run(
            ["bash", "-c", line],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=self.project,
            check=False,
        )

    def spawn(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, **kwargs: object
    ) -> subprocess.Popen[str]:
        """Start ``argv`` (a command line's words; ``bir`` means the installed one) without waiting."""
        words = [str(self.installed.bin / argv[0]) if argv[0].startswith("bir") else argv[0], *argv[1:]]
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            words, env={**self.env, **(env or {})}, cwd=self.project, text=True, **kwargs
        )

    def hook(self, event: str, body: Mapping[str, object]) -> dict[str, object]:
        """Run the installed ``bir-hook EVENT`` for the project, as Claude Code would; what it printed."""
        payload = {"session_id": "sess-sandbox", "cwd": str(self.project), "hook_event_name": event, **body}
        done = subprocess.run(
            [str(self.installed.bin / "bir-hook"), event],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=30,
            env={**self.env, "CLAUDE_PROJECT_DIR": str(self.project)},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    def processes(self) -> list[psutil.Process]:
        """Every process whose environment is this sandbox's (its BIR_HOME)."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.environ().get("BIR_HOME") == str(self.bir_home):
                    found.append(process)
            except (psutil.Error, OSError):
                continue
        return found

    def close(self) -> None:
        """Stop what the sandbox left running: its control servers, then anything else of its own."""
        self.bir("down", "--all", timeout=60)
        until = time.monotonic() + STOP_WAIT_S
        left = self.processes()
        for process in left:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.Error:
                continue
        for process in left:
            try:
                process.wait(max(0.1, until - time.monotonic()))
            except psutil.TimeoutExpired:
                process.kill()
            except psutil.Error:
                continue


def demo_sandbox(installed: Installed, root: Path) -> Sandbox:
    """A fresh sandbox under ``root``: its project has the demo fleet in ``.mcp.json``, approved."""
    home = root / "home"
    bir_home = home / ".baseinstrunner"
    project = home / "src" / "app"
    project.mkdir(parents=True)
    fleet = {"command": str(installed.python), "args": ["-m", "bir.examples.fleet_server"]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"fleet": fleet}}), encoding="utf-8")
    config = {"projects": {str(project.resolve()): {"enabledMcpjsonServers": ["fleet"]}}}
    (home / ".claude.json").write_text(json.dumps(config), encoding="utf-8")
    env = {
        "PATH": f"{installed.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "BIR_HOME": str(bir_home),
        "LANG": "C.UTF-8",
        # Smaller than the default, for a machine the tests share: bir's own behaviour does not change.
        "BIR_LOGIC_WORKERS": "1",
    }
    return Sandbox(installed, root, home, bir_home, project.resolve(), env)
