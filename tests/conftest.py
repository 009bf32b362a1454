"""Every test runs with BIR_HOME in a temporary folder: no test touches the real home."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _bir_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("bir_home")
    monkeypatch.setenv("BIR_HOME", str(home))
    return home
