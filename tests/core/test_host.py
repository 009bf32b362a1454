"""The host rule against real process trees: a direct child, a child of ``sh -c``, and ``CLAUDE_PID``."""

from __future__ import annotations

import os
import subprocess
import sys

PRINT_HOST = "from bir.core.host import host_pid; print(host_pid())"


def _host_of(argv: list[str], env: dict[str, str] | None = None) -> int:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True, env=env)
    return int(done.stdout.strip())


def test_a_direct_child_names_its_parent_as_its_host() -> None:
    assert _host_of([sys.executable, "-c", PRINT_HOST]) == os.getpid()


def test_a_child_of_a_shell_names_the_shells_parent_as_its_host() -> None:
    # `; true` keeps the shell from exec'ing its one command: the hook runs below a live `sh`, as Claude
    # Code runs command hooks (`/bin/sh -c`).
    command = f"{sys.executable} -c '{PRINT_HOST}'; true"
    assert _host_of(["/bin/sh", "-c", command]) == os.getpid()
    assert _host_of(["/bin/sh", "-c", f"/bin/sh -c \"{sys.executable} -c '{PRINT_HOST}'; true\"; true"]) == os.getpid()


def test_claude_pid_is_taken_only_when_it_names_an_ancestor() -> None:
    shell = subprocess.Popen(["/bin/sh", "-c", "sleep 30"])
    try:
        # A pid that is alive but no ancestor (an outer session's, inherited) is ignored.
        env = {**os.environ, "CLAUDE_PID": str(shell.pid)}
        assert _host_of([sys.executable, "-c", PRINT_HOST], env) == os.getpid()
    finally:
        shell.kill()
        shell.wait()
    env = {**os.environ, "CLAUDE_PID": str(os.getpid())}
    assert _host_of(["/bin/sh", "-c", f"{sys.executable} -c '{PRINT_HOST}'; true"], env) == os.getpid()
