"""Where the tests find their fixtures: the packaged example scenarios (``examples/scenarios``, the copies
that ship in the wheel) and the test-only fixtures (``tests/fixtures``); nothing outside the clone."""

from __future__ import annotations

from pathlib import Path

from bir.core.types import Scenario, parse_scenario

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SCENARIOS = REPO / "examples" / "scenarios"


def load_scenario(file_name: str) -> Scenario:
    """One of the packaged example scenarios, read as the service would send it."""
    return parse_scenario((SCENARIOS / file_name).read_text(encoding="utf-8"))
