"""The package installs as shipped: the wheel (``tests/wheel.py``, built once per session) holds the package
and nothing of the working tree, and runs every console script from a folder where the checkout is not
importable. The quick benches run from it in ``test_help_examples.py``, as the examples of their help.
"""

from __future__ import annotations

import json
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.wheel import BUILD_TIMEOUT_S, COMMAND_TIMEOUT_S, WHEEL_TEST_TIMEOUT_S, Installed, must, run

pytestmark = pytest.mark.timeout(WHEEL_TEST_TIMEOUT_S)

# Nothing of the working tree may ship: the dev venv, build leftovers, the tests, peers' scratch.
JUNK_PARTS = frozenset({".peers", ".venv", "tests", "build", ".pkg", ".git", "__pycache__", ".ci", "scripts"})


def _scripts() -> dict[str, str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        scripts: dict[str, str] = tomllib.load(f)["project"]["scripts"]
    return scripts


@pytest.fixture
def installed(wheel: Installed) -> Installed:
    return wheel


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
    done = run(
        [str(installed.bin / script), "--help"],
        cwd=installed.workdir,
        env=installed.env,
        timeout=COMMAND_TIMEOUT_S,
    )
    must(done, f"{script} --help")
    assert "usage:" in done.stdout.lower(), done.stdout[:2000]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_bir_demo_runs_the_whole_loop_from_the_installed_package_in_a_home_of_its_own(installed: Installed) -> None:
    done = run(
        [str(installed.bin / "bir"), "demo", "--json"],
        cwd=installed.workdir,
        env=installed.env,
        timeout=BUILD_TIMEOUT_S,
    )
    must(done, "bir demo --json")
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
