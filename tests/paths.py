"""Where the tests find what lies beside the repository: ``shared/`` is a sibling of the clone."""

from __future__ import annotations

from pathlib import Path

from bir.core.types import Scenario, parse_scenario

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
SCENARIOS = SHARED_FIXTURES / "scenarios"


def load_scenario(file_name: str) -> Scenario:
    """One of the shared fixture scenarios, read as the service would send it."""
    return parse_scenario((SCENARIOS / file_name).read_text(encoding="utf-8"))
