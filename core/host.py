"""The Claude Code process a bir process serves: its *host*, which ties a proxy to its session (issue 17).

What Claude Code 2.1.197 and 2.1.332 start, observed with both binaries (``tests/test_claude_session.py``
asserts it end to end):

* a stdio MCP server (``bir-proxy``, ``bir-scenario``) is started directly: its parent is the host;
* a command hook (``bir-hook``) runs through ``/bin/sh -c``: its parent is that shell and the host is the
  shell's parent (a shell that execs its one command leaves the hook the host's child);
* 2.1.332 also puts ``CLAUDE_PID`` in a command hook's environment (never in an MCP server's); 2.1.197
  does not.

So the rule is one walk: the nearest ancestor that is not a shell. ``CLAUDE_PID`` is taken only when it
names one of this process's ancestors (a ``claude`` started inside a session inherits the outer one's).
The proxies and the hooks of one session name the same host; a host that is gone is a session that
ended, whether or not ``SessionEnd`` came.

Standard library only, and two small ``/proc`` reads per ancestor: ``bir-hook`` pays for it at each call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

# The shells a hook command can run through (``/proc/<pid>/stat``'s comm, which is at most 15 chars).
SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish", "csh", "tcsh"})
# How far up the walk goes: a hook is at most a shell or two below its host.
MAX_DEPTH: Final = 6


def _stat(pid: int) -> tuple[str, int] | None:
    """``(comm, ppid)`` of ``pid`` from ``/proc``, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return None
    text = raw.decode("utf-8", "replace")
    # comm is between the first "(" and the last ")": it may itself hold spaces or parentheses.
    left, right = text.find("("), text.rfind(")")
    if left < 0 or right < left:
        return None
    fields = text[right + 2 :].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return text[left + 1 : right], int(fields[1])


def _ancestors(start: int) -> list[tuple[int, str]]:
    """``(pid, comm)`` from ``start`` upwards, at most ``MAX_DEPTH`` of them, stopping at init."""
    chain: list[tuple[int, str]] = []
    pid = start
    while pid > 1 and len(chain) < MAX_DEPTH:
        found = _stat(pid)
        if found is None:
            break
        chain.append((pid, found[0]))
        pid = found[1]
    return chain


def host_pid(env: Mapping[str, str] | None = None) -> int:
    """The pid of the Claude Code process this process serves (see the module's doc): ``CLAUDE_PID`` when
    it is an ancestor, else the nearest ancestor that is not a shell, else the parent."""
    env = os.environ if env is None else env
    parent = os.getppid()
    chain = _ancestors(parent)
    claimed = env.get("CLAUDE_PID", "")
    if claimed.isdigit() and any(pid == int(claimed) for pid, _ in chain):
        return int(claimed)
    for pid, comm in chain:
        if comm not in SHELLS:
            return pid
    return parent
