"""The matcher corpus (``bir bench match`` and the matcher's tests): recorded prompts with their parameter
values, and new prompts of four kinds.

``same_task``: the same task with other values (the rule must find the new values); ``paraphrase``: the
same task in other words; ``different_task``: another task sharing the recorded prompt's entities, verb
flips included (list/close, show/delete, read/set, show/revert); ``unrelated``. Shared by the matcher's
tests and ``bir bench match``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bir.hooks.local import match
from bir.hooks.local.calculate import template_of
from bir.hooks.local.trace import Param

RECORDED: dict[str, dict[str, Any]] = {
    "list the open incidents for fleet eu-west": {"fleet": "eu-west"},
    "show the details of the riskiest device in eu-west-1": {"region": "eu-west-1"},
    "show issue #4512": {"issue": 4512},
    "read config/thresholds.json": {"path": "config/thresholds.json"},
    "restart the api-gateway service in staging": {"service": "api-gateway", "env": "staging"},
    "list the first 5 devices in eu-west-1": {"limit": 5, "region": "eu-west-1"},
    "what is the status of order ORD-1001": {"order": "ORD-1001"},
    "show the last 10 commits on branch main": {"count": 10, "branch": "main"},
    "get the weather for Paris tomorrow": {"city": "Paris"},
    "count the failed jobs in queue ingest-eu": {"queue": "ingest-eu"},
    "show the logs of pod web-7f9c for the last hour": {"pod": "web-7f9c"},
    "find the owner of repo acme/widgets": {"repo": "acme/widgets"},
}


@dataclass(frozen=True)
class Pair:
    kind: str
    recorded: str
    new: str
    expected: dict[str, Any] = field(default_factory=dict)


PAIRS: list[Pair] = [
    Pair(
        "same_task",
        "list the open incidents for fleet eu-west",
        "list the open incidents for fleet us-east",
        {"fleet": "us-east"},
    ),
    Pair(
        "same_task",
        "show the details of the riskiest device in eu-west-1",
        "show the details of the riskiest device in ap-southeast-2",
        {"region": "ap-southeast-2"},
    ),
    Pair("same_task", "show issue #4512", "show issue #4513", {"issue": 4513}),
    Pair("same_task", "read config/thresholds.json", "read config/limits.json", {"path": "config/limits.json"}),
    Pair(
        "same_task",
        "restart the api-gateway service in staging",
        "restart the billing-worker service in production",
        {"service": "billing-worker", "env": "production"},
    ),
    Pair(
        "same_task",
        "list the first 5 devices in eu-west-1",
        "list the first 20 devices in sa-east-1",
        {"limit": 20, "region": "sa-east-1"},
    ),
    Pair(
        "same_task",
        "what is the status of order ORD-1001",
        "What is the status of order ORD-2093?",
        {"order": "ORD-2093"},
    ),
    Pair(
        "same_task",
        "show the last 10 commits on branch main",
        "show the last 3 commits on branch release-2.1",
        {"count": 3, "branch": "release-2.1"},
    ),
    Pair("same_task", "get the weather for Paris tomorrow", "get the weather for Berlin tomorrow", {"city": "Berlin"}),
    Pair(
        "same_task",
        "count the failed jobs in queue ingest-eu",
        "count the failed jobs in queue ingest-us",
        {"queue": "ingest-us"},
    ),
    Pair(
        "same_task",
        "show the logs of pod web-7f9c for the last hour",
        "show the logs of pod api-1a2b for the last hour",
        {"pod": "api-1a2b"},
    ),
    Pair(
        "same_task",
        "find the owner of repo acme/widgets",
        "find the owner of repo acme/gadgets.",
        {"repo": "acme/gadgets"},
    ),
    Pair(
        "paraphrase",
        "list the open incidents for fleet eu-west",
        "show me the open incidents of the eu-west fleet",
        {"fleet": "eu-west"},
    ),
    Pair("paraphrase", "show issue #4512", "display issue #4512", {"issue": 4512}),
    Pair("paraphrase", "get the weather for Paris tomorrow", "what's the weather in Paris tomorrow", {"city": "Paris"}),
    Pair(
        "paraphrase",
        "count the failed jobs in queue ingest-eu",
        "how many failed jobs are in queue ingest-eu",
        {"queue": "ingest-eu"},
    ),
    Pair(
        "paraphrase",
        "read config/thresholds.json",
        "show me config/thresholds.json",
        {"path": "config/thresholds.json"},
    ),
    Pair(
        "paraphrase",
        "restart the api-gateway service in staging",
        "please reboot the api-gateway service in staging",
        {"service": "api-gateway", "env": "staging"},
    ),
    Pair("different_task", "list the open incidents for fleet eu-west", "close all open incidents for fleet eu-west"),
    Pair("different_task", "list the open incidents for fleet eu-west", "list the closed incidents for fleet eu-west"),
    Pair(
        "different_task",
        "list the open incidents for fleet eu-west",
        "list the open incidents for fleet eu-west and close them",
    ),
    Pair("different_task", "show issue #4512", "delete issue #4512"),
    Pair("different_task", "read config/thresholds.json", "set config/thresholds.json"),
    Pair("different_task", "show the last 10 commits on branch main", "revert the last 10 commits on branch main"),
    Pair("different_task", "restart the api-gateway service in staging", "stop the api-gateway service in staging"),
    Pair(
        "different_task",
        "show the details of the riskiest device in eu-west-1",
        "show the details of the least risky device in eu-west-1",
    ),
    Pair("different_task", "what is the status of order ORD-1001", "cancel order ORD-1001"),
    Pair("different_task", "count the failed jobs in queue ingest-eu", "count the succeeded jobs in queue ingest-eu"),
    Pair(
        "different_task",
        "show the logs of pod web-7f9c for the last hour",
        "delete the logs of pod web-7f9c for the last hour",
    ),
    Pair("different_task", "find the owner of repo acme/widgets", "remove the owner of repo acme/widgets"),
    Pair("unrelated", "get the weather for Paris tomorrow", "write a haiku about autumn"),
    Pair("unrelated", "show issue #4512", "refactor the parser to use a state machine"),
    Pair("unrelated", "list the first 5 devices in eu-west-1", "what time is it in Tokyo"),
]


def params_of(prompt: str, values: dict[str, Any]) -> list[Param]:
    params = []
    for name, value in values.items():
        said = str(value)
        start = prompt.index(said)
        span = ((start, start + len(said)),)
        if isinstance(value, int):
            params.append(Param(name, value, "number", span))
        else:
            params.append(Param(name, said, "string", span))
    return params


def corpus_index(embed: Callable[[str], Any] | None, *, project: str = "/p") -> match.MatchIndex:
    index = match.MatchIndex()
    for i, (prompt, values) in enumerate(RECORDED.items()):
        params = params_of(prompt, values)
        template = template_of(prompt, params)
        samples = {p.name: p.sample for p in params}
        vector = embed(match.masked_template(template, samples)) if embed is not None else None
        index.put(
            match.candidate_of(
                f"scn_{i}",
                run_id=f"run_{i}",
                project=project,
                created_at=float(i),
                template=template,
                samples=samples,
                vector=vector,
            )
        )
    return index


def scenario_of(prompt: str) -> str:
    return f"scn_{list(RECORDED).index(prompt)}"


def ten_step_run() -> tuple[str, list[dict[str, Any]]]:
    """A 10-step recorded run for the calculation's time: lists, picks and commands threaded together."""
    from bir.examples.fleet_server import device_by_id, list_devices_in

    def mcp(value: object) -> str:
        return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})

    def bash(stdout: str) -> str:
        return json.dumps({"stdout": stdout, "stderr": "", "interrupted": False})

    steps: list[dict[str, Any]] = []
    for region in ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1"):
        rows = list_devices_in(region)
        top = max(rows, key=lambda r: r["risk"])
        steps.append({"toolName": "mcp__fleet__list_devices", "toolInput": {"region": region}, "toolOutput": mcp(rows)})
        steps.append(
            {
                "toolName": "mcp__fleet__get_device",
                "toolInput": {"id": top["id"]},
                "toolOutput": mcp(device_by_id(top["id"])),
            }
        )
    steps.append(
        {"toolName": "Bash", "toolInput": {"command": "git log -1 --format=%h"}, "toolOutput": bash("3f9c2ab\n")}
    )
    steps.append(
        {"toolName": "Bash", "toolInput": {"command": "git show --stat 3f9c2ab"}, "toolOutput": bash("1 file changed")}
    )
    prompt = "show the riskiest device of eu-west-1, us-east-1, ap-southeast-2 and sa-east-1, and the last commit"
    return prompt, [{"stepIndex": i, **step} for i, step in enumerate(steps)]
