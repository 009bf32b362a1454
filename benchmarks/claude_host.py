"""The clean environment a real Claude Code binary runs in offline (FACTS.md §2), and its hook entries:
shared by the end-to-end tests (``tests/claude_host.py``) and ``bir bench pin``'s whole session."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_hook(command: str, *, matcher: str | None = None, timeout_s: int | None = None) -> dict[str, Any]:
    """One matcher group with one command hook, as the ``hooks`` settings take it (``timeout`` is in seconds)."""
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout_s is not None:
        hook["timeout"] = timeout_s
    group: dict[str, Any] = {"hooks": [hook]}
    if matcher is not None:
        group["matcher"] = matcher
    return group


def claude_env(case_home: Path, case_tmp: Path, api_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The clean environment of FACTS.md §2, plus the test's ``BIR_HOME`` and ``extra``."""
    env = {
        "PATH": PATH,
        "HOME": str(case_home),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "TMPDIR": str(case_tmp),
        "CLAUDE_CODE_TMPDIR": str(case_tmp),
        "XDG_RUNTIME_DIR": str(case_tmp),
        "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": "sk-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # MCP tools in tools[] on 2.1.332 instead of deferred behind ToolSearch.
        "ENABLE_TOOL_SEARCH": "false",
        # Wait for the MCP servers before the first model request (see the module's doc), up to a minute:
        # that wait is bounded by MCP_CONNECT_TIMEOUT_MS, 5 s by default (2.1.197's binary), which a Python
        # server behind bir-proxy outlasts on a loaded 2-core machine (the model then finds no fleet tool).
        "MCP_CONNECTION_NONBLOCKING": "false",
        "MCP_CONNECT_TIMEOUT_MS": "60000",
    }
    if "BIR_HOME" in os.environ:
        env["BIR_HOME"] = os.environ["BIR_HOME"]
    env.update(extra or {})
    return env
