"""The demo upstream: a stdio MCP server named ``fleet`` with a fixed, deterministic device fleet.

It stands in for a third-party server that ``bir-proxy`` wraps, so it depends on the MCP SDK only and
never imports ``bir``. The fixture scenarios in ``../shared/fixtures/scenarios`` expect exactly
these tools:

- ``list_devices {region, limit?}``: text content, a JSON array of ``{id, name, risk}``;
- ``get_device {id}``: text content, one device as JSON with every field; an unknown id is a tool
  error result (``isError: true``), not a protocol error;
- ``slow_echo {text, delay_ms}``: answers ``text`` after ``delay_ms``, for timeout and cancellation
  tests. A cancelled call stops at once and says so on stderr (``fleet.cancelled``).

With ``FLEET_CALL_LOG`` set to a file, each call to ``list_devices``/``get_device`` is appended to it as a
JSON line (``{tool, arguments}``): a test sees what reached the server.

Run it as ``python -m bir.examples.fleet_server`` (or ``python examples/fleet_server.py`` from a checkout).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

REGIONS: tuple[str, ...] = ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1")
FLEET_SIZE = 30
MAX_LIMIT = 1000
MAX_DELAY_MS = 600_000
MAX_TEXT_CHARS = 10_000

_MODELS = ("EdgeGate 200", "EdgeGate 300", "CoreSwitch X", "SensorHub 4")
_ROLES = ("gateway", "switch", "sensor-hub", "camera", "router")
_EPOCH = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)


def _build_fleet() -> tuple[dict[str, Any], ...]:
    devices = []
    for i in range(FLEET_SIZE):
        region = REGIONS[i % len(REGIONS)]
        devices.append(
            {
                "id": f"dev-{i + 1:03d}",
                "name": f"{region}-{_ROLES[i % len(_ROLES)]}-{i // len(REGIONS) + 1:02d}",
                # 37 is coprime with 101, so the 30 scores are distinct and a sort by risk is stable.
                "risk": (i * 37) % 101,
                "region": region,
                "model": _MODELS[(i // 2) % len(_MODELS)],
                "firmware": f"4.{i % 5}.{(i * 7) % 10}",
                "status": "offline" if i % 7 == 3 else "online",
                "lastSeen": (_EPOCH + timedelta(minutes=17 * i)).isoformat().replace("+00:00", "Z"),
                "openAlerts": (i * 5) % 4,
            }
        )
    return tuple(devices)


FLEET: tuple[dict[str, Any], ...] = _build_fleet()
_BY_ID: dict[str, dict[str, Any]] = {d["id"]: d for d in FLEET}


def list_devices_in(region: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The devices of ``region`` in id order, at most ``limit`` of them, as ``{id, name, risk}``.

    Raises:
        ToolError: ``limit`` is below 1 or above ``MAX_LIMIT``.
    """
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    rows = [{"id": d["id"], "name": d["name"], "risk": d["risk"]} for d in FLEET if d["region"] == region]
    return rows if limit is None else rows[:limit]


def device_by_id(device_id: str) -> dict[str, Any]:
    """One device with all of its fields.

    Raises:
        ToolError: no device has this id.
    """
    device = _BY_ID.get(device_id)
    if device is None:
        raise ToolError(f"no device with id {device_id[:100]!r}")
    return dict(device)


def _log(event: str, **fields: Any) -> None:
    # stdout is the protocol channel; a plain JSON line on stderr keeps this demo free of bir.
    sys.stderr.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stderr.flush()


def _record_call(tool: str, **arguments: Any) -> None:
    # A test (or a curious user) can see which calls reached the server: FLEET_CALL_LOG names a file.
    path = os.environ.get("FLEET_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


def build_server() -> MCPServer:
    """The ``fleet`` server with its three tools."""
    server = MCPServer("fleet", version="1.0.0", log_level="WARNING")

    @server.tool(
        description="List the devices of a region as a JSON array of {id, name, risk}.", structured_output=False
    )
    def list_devices(region: str, limit: int | None = None) -> str:
        _record_call("list_devices", region=region, limit=limit)
        return json.dumps(list_devices_in(region, limit))

    @server.tool(description="Read one device, with all of its fields, as JSON.", structured_output=False)
    def get_device(id: str) -> str:
        _record_call("get_device", id=id)
        return json.dumps(device_by_id(id))

    @server.tool(description="Answer `text` after `delay_ms` milliseconds (for tests).", structured_output=False)
    async def slow_echo(text: str, delay_ms: int) -> str:
        if not 0 <= delay_ms <= MAX_DELAY_MS:
            raise ToolError(f"delay_ms must be between 0 and {MAX_DELAY_MS}, got {delay_ms}")
        _log("fleet.slow_echo_started", delay_ms=delay_ms)
        try:
            await anyio.sleep(delay_ms / 1000)
        except anyio.get_cancelled_exc_class():
            _log("fleet.cancelled", tool="slow_echo", delay_ms=delay_ms)
            raise
        return text[:MAX_TEXT_CHARS]

    return server


def main() -> None:
    """Serve ``fleet`` on stdin/stdout until stdin closes."""
    build_server().run("stdio")


if __name__ == "__main__":
    main()
