"""Real peers for the tests, installed once into ``<repo>/.peers/`` (gitignored) from npm and PyPI.

Every install runs under a file lock, so tests (or pytest processes) that ask at once install once.
A peer that cannot be installed (no npm, no registry) FAILS the test with the reason: a real-host
test that skipped did not run, and CI must not pass without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

PEERS = REPO / ".peers"
INSTALL_TIMEOUT_S = 600
VERSION_TIMEOUT_S = 30
# Both are covered by the end-to-end tests: 2.1.197 is the last to declare Node >= 18 (npm picks it by
# default on Node 20); 2.1.332 declares Node >= 22 but ships its own runtime (FACTS.md §1).
CLAUDE_CODE_VERSIONS = ("2.1.332", "2.1.197")
# The time an end-to-end test may take when it is the one that installs Claude Code (245-402 MB).
INSTALLING_TEST_TIMEOUT_S = INSTALL_TIMEOUT_S + 120


@contextlib.contextmanager
def _locked(prefix: Path) -> Iterator[None]:
    PEERS.mkdir(parents=True, exist_ok=True)
    with (prefix.parent / f"{prefix.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def npm_install(prefix: Path, package: str, entry: Path) -> Path:
    """Install ``package`` (``name@version``) into ``prefix`` unless ``entry`` exists; returns ``entry``.

    Raises:
        pytest.fail.Exception: npm is missing, or the install failed or did not produce ``entry``.
    """
    with _locked(prefix):
        if not entry.exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail(f"npm is not installed: cannot install the test peer {package} (Node 20 and npm needed)")
            prefix.mkdir(parents=True, exist_ok=True)
            try:
                done = subprocess.run(
                    [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", package],
                    capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                pytest.fail(f"npm install {package} took more than {INSTALL_TIMEOUT_S}s (is the registry reachable?)")
            if done.returncode != 0 or not entry.exists():
                pytest.fail(
                    f"npm install {package} failed (exit {done.returncode}; is the npm registry reachable?); "
                    f"{entry} is missing. npm said: {done.stderr[-600:]}"
                )
    return entry


def pip_install(venv: Path, requirement: str, script: str) -> Path:
    """Install ``requirement`` into a venv of its own unless its ``bin/<script>`` exists; returns that path.

    Raises:
        pytest.fail.Exception: the venv could not be made, or PyPI could not be reached.
    """
    entry = venv / "bin" / script
    with _locked(venv):
        if not entry.exists():
            venv_command = [sys.executable, "-m", "venv", str(venv)]
            made = subprocess.run(venv_command, capture_output=True, text=True, check=False)
            if made.returncode != 0:
                pytest.fail(f"cannot create a venv for {requirement}: {made.stderr[-600:]}")
            try:
                done = subprocess.run(
                    [str(venv / "bin" / "pip"), "install", "--quiet", requirement],
                    capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                pytest.fail(f"pip install {requirement} took more than {INSTALL_TIMEOUT_S}s (is PyPI reachable?)")
            if done.returncode != 0 or not entry.exists():
                pytest.fail(f"pip install {requirement} failed (is PyPI reachable?): {done.stderr[-600:]}")
    return entry


def claude_code(version: str) -> Path:
    """The native ``claude`` binary of ``@anthropic-ai/claude-code@<version>``, installed on first use and checked.

    The binary comes in the platform package (an optional dependency fetched from the registry); it is
    run directly, so a skipped postinstall (which only links it over the wrapper's stub) does no harm.

    Raises:
        pytest.fail.Exception: the install failed, or the binary does not report ``version``.
    """
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        pytest.fail(f"no Claude Code binary for {sys.platform}/{platform.machine()} in these tests (linux only)")
    prefix = PEERS / f"claude-code-{version}"
    binary = prefix / "node_modules" / "@anthropic-ai" / f"claude-code-linux-{arch}" / "claude"
    npm_install(prefix, f"@anthropic-ai/claude-code@{version}", binary)
    env = {"PATH": "/usr/bin:/bin", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    try:
        with tempfile.TemporaryDirectory(prefix="claude-version-") as home:
            shown = subprocess.run(
                [str(binary), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False,
                stdin=subprocess.DEVNULL, env={**env, "HOME": home, "TMPDIR": home},
            )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"{binary} --version did not run: {exc!r} (delete {prefix} to install it again)")
    if not shown.stdout.startswith(f"{version} "):
        pytest.fail(
            f"{binary} --version said {shown.stdout[:200]!r} (stderr {shown.stderr[-300:]!r}), not {version}; "
            f"delete {prefix} to install it again"
        )
    return binary
