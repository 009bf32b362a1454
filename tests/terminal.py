"""A ``bir`` command on a terminal, as a person runs it: a real pseudo-terminal as its stdin, stdout and
stderr, each ``[y/N]`` question answered in turn, everything the terminal got read back."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

BIR = str(Path(sys.executable).parent / "bir")


def on_a_terminal(args: list[str], env: dict[str, str], answers: list[str]) -> tuple[int, str]:
    """Run ``bir args`` on a pseudo-terminal, answering each question in turn; its exit status and what the
    terminal showed (line ends as ``\\n``; a redrawn line's ``\\r`` and erase codes kept)."""
    answers = list(answers)
    leader, follower = pty.openpty()
    process = subprocess.Popen([BIR, *args], stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break  # the command closed the terminal: it is done
                if not chunk:
                    break
                seen += chunk
                if seen.rstrip().endswith(b"[y/N]") and answers:
                    os.write(leader, (answers.pop(0) + "\n").encode())
            elif process.poll() is not None:
                break
        code = process.wait(30)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    return code, seen.decode("utf-8", "replace").replace("\r\n", "\n")
