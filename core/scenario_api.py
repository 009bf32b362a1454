"""The service's scenario routes (spec §16.5), as thin typed calls over ``ServiceClient``.

Every call answers a ``Reply``: the HTTP status and the body exactly as it came, because ``bir scenario
--json`` prints the service's body unchanged and the words for a refusal depend on its ``error`` code.
Nothing here decides what a status means; ``bir.hooks.commands.scenario`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from bir.core.service import ServiceClient

RUN_PREFIX: Final = "run_"
SCENARIO_PREFIX: Final = "scn_"
EDIT_PREFIX: Final = "sedit_"
# A check runs the recording through the service's sandbox (its own budget is 5 s, queued behind
# other checks): a changing request may take longer than BIR_SERVICE_TIMEOUT_MS, and stays under the
# 120 s bir-scenario gives a changing tool.
CHANGE_TIMEOUT_S: Final = 60.0


def _seg(value: str | int) -> str:
    # Ids come from a person's command line: quoting keeps one from reaching another route.
    return quote(str(value), safe="")


@dataclass(frozen=True)
class Reply:
    """One answer of the service: its status and its body, unchanged."""

    status: int
    raw: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def data(self) -> Any:
        """The body as JSON, or None when it is empty or not JSON."""
        if not self.raw:
            return None
        try:
            return json.loads(self.raw)
        except ValueError:
            return None

    def error_code(self) -> str | None:
        """The body's ``error`` field when it is a short code (``undo_refused``, ``nothing_to_change``…)."""
        data = self.data()
        code = data.get("error") if isinstance(data, dict) else None
        return code if isinstance(code, str) and code else None

    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")


class ScenarioApi:
    """The scenario routes of one ``ServiceClient`` (which owns the URL, the token and the bounds).

    ``read_timeout_s`` bounds the reading routes (None: the client's own timeout); the changing routes
    get ``CHANGE_TIMEOUT_S``.
    """

    def __init__(self, service: ServiceClient, *, read_timeout_s: float | None = None) -> None:
        self.service = service
        self.read_timeout_s = read_timeout_s

    async def _get(self, path: str, route: str) -> Reply:
        status, raw = await self.service.request("GET", path, route=route, timeout_s=self.read_timeout_s)
        return Reply(status, raw)

    async def _send(self, method: str, path: str, route: str, body: Mapping[str, Any]) -> Reply:
        status, raw = await self.service.request(
            method, path, route=route, json_body=dict(body), timeout_s=CHANGE_TIMEOUT_S
        )
        return Reply(status, raw)

    async def list_runs(self) -> Reply:
        """``GET /recordings/runs``. Raises: ServiceError: no answer."""
        return await self._get("/recordings/runs", "runs")

    async def run_scenario(self, run_id: str) -> Reply:
        """``GET /recordings/runs/:id/scenario``: a run's whole-run scenario. Raises: ServiceError: no answer."""
        return await self._get(f"/recordings/runs/{_seg(run_id)}/scenario", "run_scenario")

    async def scenario(self, scenario_id: str) -> Reply:
        """``GET /scenarios/:id``. Raises: ServiceError: no answer."""
        return await self._get(f"/scenarios/{_seg(scenario_id)}", "scenario")

    async def calculate(self, run_id: str, *, force: bool, discard_edits: bool) -> Reply:
        """``POST /recordings/runs/:id/calculate``. Raises: ServiceError: no answer."""
        body: dict[str, Any] = {}
        if force:
            body["force"] = True
        if discard_edits:
            body["discardEdits"] = True
        return await self._send("POST", f"/recordings/runs/{_seg(run_id)}/calculate", "calculate", body)

    async def recalculate(self, scenario_id: str, *, discard_edits: bool) -> Reply:
        """``POST /scenarios/:id/recalculate``. Raises: ServiceError: no answer."""
        body = {"discardEdits": True} if discard_edits else {}
        return await self._send("POST", f"/scenarios/{_seg(scenario_id)}/recalculate", "recalculate", body)

    async def check(self, scenario_id: str, step: int, body: Mapping[str, Any]) -> Reply:
        """``POST /scenarios/:id/steps/:n/check``: try a change, write nothing. Raises: ServiceError: no answer."""
        return await self._send("POST", f"/scenarios/{_seg(scenario_id)}/steps/{_seg(step)}/check", "check", body)

    async def save(self, scenario_id: str, step: int, body: Mapping[str, Any]) -> Reply:
        """``PATCH /scenarios/:id/steps/:n``: the same check, then save. Raises: ServiceError: no answer."""
        return await self._send("PATCH", f"/scenarios/{_seg(scenario_id)}/steps/{_seg(step)}", "save", body)

    async def dry_replay(self, scenario_id: str, prompt: str, params: Mapping[str, object]) -> Reply:
        """``POST /scenarios/:id/replay``: the stored logic over the recorded outputs; runs no tool, writes nothing.

        Its one model call (deriving parameters) and the sandbox make it as slow as a check, so it gets
        the changing routes' time limit. Raises: ServiceError: no answer.
        """
        body: dict[str, Any] = {"prompt": prompt}
        if params:
            body["params"] = dict(params)
        return await self._send("POST", f"/scenarios/{_seg(scenario_id)}/replay", "dry_replay", body)

    async def edits(self, scenario_id: str) -> Reply:
        """``GET /scenarios/:id/edits``, newest first. Raises: ServiceError: no answer."""
        return await self._get(f"/scenarios/{_seg(scenario_id)}/edits", "edits")

    async def revert(self, scenario_id: str, edit_id: str, body: Mapping[str, Any]) -> Reply:
        """``POST /scenarios/:id/edits/:e/revert``. Raises: ServiceError: no answer."""
        return await self._send("POST", f"/scenarios/{_seg(scenario_id)}/edits/{_seg(edit_id)}/revert", "revert", body)
