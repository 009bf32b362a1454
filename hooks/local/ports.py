"""What the calculation's helpers (``sharpen``, ``model_pass``) need of the running local service, as a
protocol, so they do not import the runtime that calls them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bir.hooks.local.embed import Embedder
    from bir.hooks.local.match import MatchIndex
    from bir.hooks.local.store import ScenarioRow, Store


class Service(Protocol):
    """The running local service (``bir.hooks.local.runtime.LocalService``)."""

    store: Store
    embedder: Embedder
    index: MatchIndex
    project: str | None

    def clock(self) -> float: ...

    def has_hand_edits(self, scenario_id: str) -> bool: ...

    async def pool(self) -> Any: ...

    async def calculate_run(self, run_id: str, *, discard_edits: bool = False) -> ScenarioRow | None: ...
