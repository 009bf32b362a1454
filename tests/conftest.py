"""Every test runs with BIR_HOME in a temporary folder: no test touches the real home.

Tests that run a real Claude Code ask for ``claude_binary`` (see ``tests/claude_host.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends import backend, pool  # noqa: F401 - the service-contract fixtures (tests/backends.py)
from tests.peers import CLAUDE_CODE_VERSIONS, claude_code
from tests.sandbox import Sandbox, demo_sandbox
from tests.wheel import Installed, build_and_install


@pytest.fixture(autouse=True)
def _bir_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("bir_home")
    monkeypatch.setenv("BIR_HOME", str(home))
    return home


@pytest.fixture(scope="session", params=CLAUDE_CODE_VERSIONS)
def claude_binary(request: pytest.FixtureRequest) -> Path:
    """A real Claude Code binary, once per version in ``CLAUDE_CODE_VERSIONS``, installed on first use.

    A test that asks for it should carry ``pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)``: the first
    one installs (hundreds of MB from npm) inside its own time limit.
    """
    return claude_code(str(request.param))


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from this tree and installed into a fresh venv, once per test session
    (``tests/wheel.py``). A test that asks for it carries ``pytest.mark.timeout(WHEEL_TEST_TIMEOUT_S)``."""
    return build_and_install(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def demo(wheel: Installed, tmp_path: Path) -> Iterator[Sandbox]:
    """A new user's machine with the wheel installed and the demo fleet in a project (``tests/sandbox.py``)."""
    sandbox = demo_sandbox(wheel, tmp_path / "sandbox")
    try:
        yield sandbox
    finally:
        sandbox.close()
