"""Where the tests find what lies beside the repository: ``shared/`` is a sibling of the clone."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
SCENARIOS = SHARED_FIXTURES / "scenarios"
