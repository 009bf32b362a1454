"""The package installs as shipped: the wheel (``tests/wheel.py``, built once per session) holds the package
and nothing of the working tree, and runs every console script from a folder where the checkout is not
importable. The quick benches run from it in ``test_help_examples.py``, as the examples of their help.
"""

from __future__ import annotations

import tomllib
import zipfile

import pytest

from tests.paths import REPO
from tests.wheel import COMMAND_TIMEOUT_S, WHEEL_TEST_TIMEOUT_S, Installed, must, run

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
