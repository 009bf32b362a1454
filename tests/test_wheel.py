"""The package installs as shipped: the wheel, built from a clean copy of the tree and installed into a
fresh virtual environment without the dev extras, runs every console script and ``bir bench proxy``
from a folder where the checkout is not importable.

One module-scoped fixture builds and installs once; pip resolves the runtime dependencies from its
index (its cache makes that quick). Both quick benches run too: ``bench proxy`` starts the shipped
demo fleet with ``python -m``, ``bench eval`` the shipped workers and floor (about 10 s each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import REPO, SCENARIOS

# Building and installing fetches from pip's cache or index; the bench itself takes about 30 s.
pytestmark = pytest.mark.timeout(600)

# Nothing of the working tree may ship: the dev venv, build leftovers, the tests, peers' scratch.
JUNK_PARTS = frozenset({".peers", ".venv", "tests", "build", ".pkg", ".git", "__pycache__", ".ci", "scripts"})
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".peers", ".pkg", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache"
)
INSTALL_TIMEOUT_S = 480
COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    python: Path
    site_bir: Path  # the installed package folder
    workdir: Path  # empty: the checkout is not importable from here
    env: dict[str, str]


def _scripts() -> dict[str, str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        scripts: dict[str, str] = tomllib.load(f)["project"]["scripts"]
    return scripts


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _must(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        pytest.fail(f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
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
    _must(
        _run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(source)],
            cwd=root,
            env=env,
            timeout=INSTALL_TIMEOUT_S,
        ),
        "pip wheel",
    )
    (wheel,) = wheels.glob("bir-*.whl")
    target = root / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(target)
    python = target / "bin" / "python"
    _must(
        _run(
            [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
            cwd=root,
            env=env,
            timeout=INSTALL_TIMEOUT_S,
        ),
        "pip install of the wheel",
    )
    found = _run(
        [str(python), "-c", "import bir, pathlib; print(pathlib.Path(bir.__file__).parent)"],
        cwd=root,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
    )
    _must(found, "import bir")
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


def test_the_wheel_holds_the_package_and_nothing_of_the_working_tree(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
    junk = [name for name in names if JUNK_PARTS.intersection(name.split("/")[:-1])]
    assert junk == [], f"the wheel carries files of the working tree: {junk[:20]}"
    outside = [name for name in names if not name.startswith(("bir/", "bir-"))]
    assert outside == [], f"the wheel installs top-level names other than bir: {outside[:20]}"
    assert "bir/examples/fleet_server.py" in names
    assert "bir/py.typed" in names
    assert any(name.startswith("bir/examples/scenarios/") and name.endswith(".json") for name in names)


def test_the_installed_package_has_the_demo_fleet_and_no_tests(installed: Installed) -> None:
    package = installed.site_bir
    assert package.parent.name == "site-packages", f"bir was imported from {package}, not the fresh venv"
    assert not (package / "tests").exists()
    assert not (package.parent / "tests").exists()
    assert (package / "examples" / "fleet_server.py").is_file()
    assert list((package / "examples" / "scenarios").glob("*.json")), "no scenario JSON was installed"


@pytest.mark.parametrize("script", sorted(_scripts()))
def test_every_console_script_answers_help(installed: Installed, script: str) -> None:
    done = _run(
        [str(installed.bin / script), "--help"],
        cwd=installed.workdir,
        env=installed.env,
        timeout=COMMAND_TIMEOUT_S,
    )
    _must(done, f"{script} --help")
    assert "usage:" in done.stdout.lower(), done.stdout[:2000]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (["proxy"], "bir bench proxy"),
        (["eval"], "bir bench eval"),
        (["pin"], "bir bench pin"),
        (["eval", "--scenario", str(SCENARIOS / "fleet-mixed.json")], "bir bench eval --scenario"),
    ],
    ids=["proxy", "eval", "pin", "eval-scenario"],
)
def test_each_quick_bench_runs_from_the_installed_package(
    installed: Installed, target: list[str], expected: str
) -> None:
    done = _run(
        [str(installed.bin / "bir"), "bench", *target, "--quick"],
        cwd=installed.workdir,
        env=installed.env,
        timeout=INSTALL_TIMEOUT_S,
    )
    _must(done, f"bir bench {' '.join(target)} --quick")
    assert expected in done.stdout, done.stdout[:2000]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert not any(installed.workdir.iterdir()), "the bench wrote into its working folder"


def test_bir_demo_runs_the_whole_loop_from_the_installed_package_in_a_home_of_its_own(installed: Installed) -> None:
    done = _run(
        [str(installed.bin / "bir"), "demo", "--json"],
        cwd=installed.workdir,
        env=installed.env,
        timeout=INSTALL_TIMEOUT_S,
    )
    _must(done, "bir demo --json")
    document = json.loads(done.stdout)
    assert document["ok"] is True, document["error"]
    stages = document["stages"]
    assert stages["calculated"]["state"] == "ready"
    assert (stages["turnTwo"]["rule"], stages["turnTwo"]["params"]) == ("slot", {"region": "us-east-1"})
    assert [call["tool"] for call in stages["turnTwo"]["ran"]] == ["list_devices", "get_device"]
    assert stages["booked"]["outcome"] == "steered_full"
    assert stages["booked"]["stats"]["savedTokens"] == stages["turnOne"]["tokens"] - stages["turnTwo"]["tokens"]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert '"event"' not in done.stderr, "a log line reached the terminal"
    # The demo's home was its own and is gone; the environment's home got nothing.
    assert not Path(stages["setup"]["birHome"]).exists()
    assert not (Path(installed.env["BIR_HOME"]) / "local").exists()
    assert not any(installed.workdir.iterdir()), "the demo wrote into its working folder"
