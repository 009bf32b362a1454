"""The package as shipped, built once per test session: the wheel, from a clean copy of the tree,
installed into a fresh virtual environment without the dev extras.

``conftest.py`` offers it as the session fixture ``wheel``; the tests that concern what a user meets
(``test_wheel.py``, ``test_commands.py``, ``test_help_examples.py``) run its console scripts from a folder
where the checkout is not importable. pip resolves the runtime dependencies from its index (its cache
makes that quick).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import REPO

# Building and installing fetches from pip's cache or index: the first test that asks pays for it.
BUILD_TIMEOUT_S = 480
# What a test that may be the first to ask for the wheel gives itself (pytest.mark.timeout).
WHEEL_TEST_TIMEOUT_S = 900
COMMAND_TIMEOUT_S = 120
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".peers", ".pkg", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache"
)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    python: Path
    site_bir: Path  # the installed package folder
    workdir: Path  # empty: the checkout is not importable from here
    env: dict[str, str]


def run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def must(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        pytest.fail(f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def build_and_install(root: Path) -> Installed:
    """Build the wheel from a copy of the tree under ``root`` and install it into ``root/venv``.

    Raises:
        pytest.fail.Exception: the build, the install or the first import failed.
    """
    # A copy, so that a stale build/ of the checkout cannot leak into the wheel and the checkout gets none.
    source = root / "src"
    shutil.copytree(REPO, source, ignore=COPY_IGNORE)
    home = root / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(home)),
        "BIR_HOME": str(home),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "LANG": "C.UTF-8",
    }
    for passed in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CACHE_DIR", "PIP_CERT", "HTTPS_PROXY", "HTTP_PROXY"):
        if passed in os.environ:
            env[passed] = os.environ[passed]
    wheels = root / "wheels"
    must(
        run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(source)],
            cwd=root,
            env=env,
            timeout=BUILD_TIMEOUT_S,
        ),
        "pip wheel",
    )
    (wheel,) = wheels.glob("bir-*.whl")
    target = root / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(target)
    python = target / "bin" / "python"
    must(
        run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], cwd=root, env=env, timeout=BUILD_TIMEOUT_S),
        "pip install of the wheel",
    )
    found = run(
        [str(python), "-c", "import bir, pathlib; print(pathlib.Path(bir.__file__).parent)"],
        cwd=root,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
    )
    must(found, "import bir")
    workdir = root / "empty"
    workdir.mkdir()
    return Installed(
        wheel=wheel,
        bin=target / "bin",
        python=python,
        site_bir=Path(found.stdout.strip()),
        workdir=workdir,
        env=env,
    )
