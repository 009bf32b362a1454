"""The logic bodies ``bir bench eval`` measures, each with deterministic generated arguments.

A case is ``(name, kind, body, args_factory)``; ``args_factory()`` answers the arguments in the
logic contract's order (logic-contract.md). The data comes from fixed seeds, so two runs, and the
pool and the in-process floor of one run, see the same bytes. The ``mix`` is every case in turn.

Only the standard library is used here: the floor's subprocess and the tests import this too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Final, NamedTuple

MIX: Final = "mix"

# Iterations of the ``work_1ms`` loop: about 1 ms in the workers' V8 on the 2-core machine the
# results in benchmarks/results/ were recorded on (V8 runs this build's loop at ~12 ns an iteration).
WORK_ITERATIONS: Final = 80_000

DEVICE_OUTPUT_BYTES: Final = 24 * 1024
LOG_OUTPUT_BYTES: Final = 50 * 1024
LOG_LEVELS: Final = ("ERROR", "WARN", "INFO", "DEBUG")
LOG_LINE_PATTERN: Final = r"^(\d{4}-\d\d-\d\dT[\d:.]+Z) (ERROR|WARN|INFO|DEBUG) \[([\w.-]+)\] (.*)$"


class Case(NamedTuple):
    name: str
    kind: str
    body: str
    args_factory: Callable[[], tuple[object, ...]]


# --- data ----------------------------------------------------------------------------------------------


def device_rows() -> list[dict[str, object]]:
    """Device rows whose MCP ``CallToolResult`` text is about 24 KB; every risk is distinct."""
    rng = random.Random(24)
    risks = rng.sample(range(1000), 1000)
    rows: list[dict[str, object]] = []
    size = 0
    while size < DEVICE_OUTPUT_BYTES:
        i = len(rows)
        row: dict[str, object] = {
            "id": f"dev-{i:05d}",
            "name": f"{rng.choice(('edge-gw', 'core-sw', 'kiosk', 'cam', 'pos'))}-{i:03d}",
            "region": rng.choice(("eu-west-1", "eu-central-1", "us-east-1")),
            "os": rng.choice(("linux-6.1", "linux-5.15", "rtos-3.2")),
            "risk": risks[i],
            "lastSeen": f"2025-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
            "tags": rng.sample(["edge", "prod", "lab", "pci", "legacy", "eol"], 2),
            "openPorts": sorted(rng.sample([22, 80, 443, 502, 1883, 8080], 2)),
        }
        rows.append(row)
        size = len(device_output(rows))
    return rows


def device_output(rows: list[dict[str, object]]) -> str:
    """The JSON text of a ``CallToolResult`` carrying ``rows`` as its text content."""
    return json.dumps({"content": [{"type": "text", "text": json.dumps(rows)}], "isError": False})


def log_text() -> str:
    """About 50 KB of service log lines, mostly INFO, with WARN, ERROR and DEBUG among them."""
    rng = random.Random(50)
    services = ("svc.api", "svc.auth", "svc.billing", "worker.sync", "db-pool")
    words = ("request", "handled", "retry", "timeout", "cache", "miss", "token", "refreshed", "row", "locked")
    lines: list[str] = []
    size = 0
    while size < LOG_OUTPUT_BYTES:
        i = len(lines)
        level = rng.choices(LOG_LEVELS, weights=(3, 9, 70, 18))[0]
        message = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
        line = (
            f"2025-11-02T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 1000:03d}Z {level} "
            f"[{rng.choice(services)}] {message} id={rng.randint(1, 99999)} ms={rng.randint(1, 900)}"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def bash_output(stdout: str) -> str:
    """The JSON text of a Bash ``tool_response`` with ``stdout``."""
    return json.dumps({"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False})


def raw_params() -> dict[str, object]:
    """Twenty parameters as a model might fill them in: mixed case, padding, numbers as text."""
    return {
        "Region": "  EU-West-1 ",
        "deviceLimit": "250",
        "minRisk": 700.456,
        "includeTags": ["prod", "edge", "PCI"],
        "excludeTags": ["lab"],
        "ownerEmail": "Ops@Example.COM ",
        "sortOrder": "DESC",
        "pageSize": 50,
        "pageToken": None,
        "dryRun": False,
        "osFamily": " Linux ",
        "lastSeenAfter": "2025-11-01T00:00:00Z",
        "siteCode": "dub-02",
        "ticketRef": "INC-20431",
        "maxPorts": "6",
        "reportFormat": "Markdown",
        "notify": True,
        "timeZone": "Europe/Dublin",
        "vendorFilter": ["Cisco", "Juniper", "aruba"],
        "note": "  check the gateways first  ",
    }


# --- bodies --------------------------------------------------------------------------------------------

TRIVIAL_BODY: Final = "return { region: params.region, limit: params.limit };"

PARSE_RANK_BODY: Final = """const r = JSON.parse(toolOutput);
const rows = JSON.parse(r.content[0].text);
rows.sort((a, b) => b.risk - a.risk);
const top = rows.slice(0, 5).map((d) => ({ id: d.id, name: d.name, risk: d.risk, region: d.region }));
return { topDevices: top, highestRiskDeviceId: top[0].id, deviceCount: rows.length };"""

REGEX_SCAN_BODY: Final = (
    """const out = JSON.parse(toolOutput);
const re = /"""
    + LOG_LINE_PATTERN
    + """/gm;
const levels = { ERROR: 0, WARN: 0, INFO: 0, DEBUG: 0 };
let m;
let firstError = null;
while ((m = re.exec(out.stdout)) !== null) {
  levels[m[2]]++;
  if (m[2] === "ERROR" && firstError === null) firstError = m[3] + ": " + m[4];
}
return { levels, firstError };"""
)

WORK_BODY: Final = """let h = 2166136261 | 0;
const n = params.n;
for (let i = 0; i < n; i++) {
  h ^= i & 0xff;
  h = Math.imul(h, 16777619);
}
return { hash: h >>> 0, n };"""

PARAMS_MERGE_BODY: Final = """const out = {};
for (const [k, v] of Object.entries(params)) {
  const key = (k[0].toLowerCase() + k.slice(1)).replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());
  if (v === null || v === undefined) continue;
  if (typeof v === "string") {
    const t = v.trim();
    out[key] = /^-?\\d+(\\.\\d+)?$/.test(t) ? Number(t) : t.toLowerCase();
  } else if (typeof v === "number") {
    out[key] = Math.round(v * 100) / 100;
  } else if (Array.isArray(v)) {
    out[key] = v.map((x) => String(x).toLowerCase()).sort();
  } else {
    out[key] = v;
  }
}
out.device_limit = Math.min(out.device_limit || 200, 1000);
out.page_size = Math.max(1, Math.min(out.page_size || 50, 200));
return out;"""

RESPONSE_MODEL_BODY: Final = """const top = respParams.topDevices;
return {
  region: params.region,
  summary: {
    checked: respParams.deviceCount,
    highest: { id: respParams.highestRiskDeviceId, risk: top[0].risk },
    levels: respParams.levels,
  },
  devices: top.map((d, i) => ({ rank: i + 1, id: d.id, name: d.name, risk: d.risk, flagged: d.risk >= 900 })),
  requestedBy: { user: params.user, tags: params.tags.slice(0, 3) },
};"""


# --- arguments -----------------------------------------------------------------------------------------


def _trivial_args() -> tuple[object, ...]:
    return ({"region": "eu-west-1", "limit": 200}, {})


def _parse_rank_args() -> tuple[object, ...]:
    return (device_output(device_rows()), {"region": "eu-west-1"}, {})


def _regex_scan_args() -> tuple[object, ...]:
    return (bash_output(log_text()), {"service": "fleet"}, {})


def _work_args() -> tuple[object, ...]:
    return ({"n": WORK_ITERATIONS}, {})


def _params_merge_args() -> tuple[object, ...]:
    return (raw_params(),)


def _response_model_args() -> tuple[object, ...]:
    top = [
        {"id": f"dev-{i:05d}", "name": f"edge-gw-{i:03d}", "risk": 999 - i * 60, "region": "eu-west-1"}
        for i in range(5)
    ]
    resp = {
        "topDevices": top,
        "highestRiskDeviceId": top[0]["id"],
        "deviceCount": 131,
        "levels": {"ERROR": 19, "WARN": 61, "INFO": 451, "DEBUG": 117},
    }
    return ({"region": "eu-west-1", "user": "ops", "tags": ["prod", "edge", "pci", "lab"]}, resp)


CASES: Final[tuple[Case, ...]] = (
    Case("trivial", "toolInputLogic", TRIVIAL_BODY, _trivial_args),
    Case("parse_rank_24kb", "toolOutputLogic", PARSE_RANK_BODY, _parse_rank_args),
    Case("regex_scan_50kb", "toolOutputLogic", REGEX_SCAN_BODY, _regex_scan_args),
    Case("work_1ms", "toolInputLogic", WORK_BODY, _work_args),
    Case("params_merge", "paramsLogic", PARAMS_MERGE_BODY, _params_merge_args),
    Case("response_model", "responseParamsLogic", RESPONSE_MODEL_BODY, _response_model_args),
)


def work_hash(n: int) -> int:
    """What ``work_1ms`` answers for ``n``, computed in Python."""
    h = 2166136261
    for i in range(n):
        h ^= i & 0xFF
        h = (h * 16777619) & 0xFFFFFFFF
    return h
