"""The calculation corpus: recorded runs of different shapes, each with what the calculator must make of it.

Every run is what the recorder would have stored (``toolInput`` the arguments that ran, ``toolOutput``
the recorded text: an MCP call's whole ``CallToolResult``, a built-in's ``tool_response``). A ``ready``
case also says how it must replay on new data: the new prompt's values, the outputs the tools give
then, and the inputs the steps must get.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bir.benchmarks import match_corpus
from bir.examples.fleet_server import device_by_id, list_devices_in

HOSTILE = 'it\'s "q" `t` ${p.x()} </script> \u2028\u2029 \\'


def mcp(value: object, *, is_error: bool = False) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps({"content": [{"type": "text", "text": text}], "isError": is_error})


def bash(stdout: str, stderr: str = "") -> str:
    return json.dumps(
        {"stdout": stdout, "stderr": stderr, "interrupted": False, "isImage": False, "noOutputExpected": False}
    )


def read(path: str, content: str) -> str:
    lines = content.count("\n") + 1
    return json.dumps(
        {
            "type": "text",
            "file": {"filePath": path, "content": content, "numLines": lines, "startLine": 1, "totalLines": lines},
        }
    )


def step(tool: str, tool_input: dict[str, Any], output: str, error: str | None = None) -> dict[str, Any]:
    return {"toolName": tool, "toolInput": tool_input, "toolOutput": output, "error": error}


@dataclass(frozen=True)
class Replay:
    prompt: str
    params: dict[str, Any]  # what slot alignment must find in the new prompt
    outputs: list[str]
    inputs: list[dict[str, Any]]


@dataclass(frozen=True)
class Case:
    name: str
    prompt: str
    steps: list[dict[str, Any]]
    ready: bool
    reason: str = ""  # a phrase the not-ready reason holds
    excluded: tuple[str, ...] = ()  # tools left out on purpose
    replay: Replay | None = None
    kept: int | None = None  # how many steps the scenario keeps, when it is not all of them

    def bodies(self) -> list[dict[str, Any]]:
        return [{"stepIndex": i, **s} for i, s in enumerate(self.steps)]


def _riskiest(region: str) -> dict[str, Any]:
    return max(list_devices_in(region), key=lambda r: r["risk"])


EU, US = list_devices_in("eu-west-1"), list_devices_in("us-east-1")
EU_TOP, US_TOP = _riskiest("eu-west-1"), _riskiest("us-east-1")
THRESHOLDS = '{"risk": 70, "offline_minutes": 30}'
# A list whose first row is also the riskiest: one recording cannot tell "first" from "riskiest".
AMBIGUOUS = [{"id": "dev-100", "risk": 90}, {"id": "dev-101", "risk": 20}, {"id": "dev-102", "risk": 50}]
MIDDLE = [{"id": "dev-200", "risk": 10}, {"id": "dev-201", "risk": 40}, {"id": "dev-202", "risk": 90}]

CASES: list[Case] = [
    Case(
        "one_mcp_call",
        "list the devices in eu-west-1",
        [step("mcp__fleet__list_devices", {"region": "eu-west-1"}, mcp(EU))],
        ready=True,
        replay=Replay("list the devices in us-east-1", {"region": "us-east-1"}, [mcp(US)], [{"region": "us-east-1"}]),
    ),
    Case(
        "list_pick_detail",
        "show the details of the riskiest device in eu-west-1",
        [
            step("mcp__fleet__list_devices", {"region": "eu-west-1"}, mcp(EU)),
            step("mcp__fleet__get_device", {"id": EU_TOP["id"]}, mcp(device_by_id(EU_TOP["id"]))),
        ],
        ready=True,
        replay=Replay(
            "show the details of the riskiest device in us-east-1",
            {"region": "us-east-1"},
            [mcp(US), mcp(device_by_id(US_TOP["id"]))],
            [{"region": "us-east-1"}, {"id": US_TOP["id"]}],
        ),
    ),
    Case(
        "bare_content_array_from_a_hook",
        "show the details of the riskiest device in eu-west-1",
        [
            step(
                "mcp__fleet__list_devices",
                {"region": "eu-west-1"},
                json.dumps([{"type": "text", "text": json.dumps(EU)}]),
            ),
            step("mcp__fleet__get_device", {"id": EU_TOP["id"]}, mcp(device_by_id(EU_TOP["id"]))),
        ],
        ready=True,
        replay=Replay(
            "show the details of the riskiest device in us-east-1",
            {"region": "us-east-1"},
            # The replay sees the proxy's whole CallToolResult: the same body reads both shapes.
            [mcp(US), mcp(device_by_id(US_TOP["id"]))],
            [{"region": "us-east-1"}, {"id": US_TOP["id"]}],
        ),
    ),
    Case(
        "file_read",
        "read config/thresholds.json",
        [
            step(
                "Read",
                {"file_path": "/work/proj/config/thresholds.json"},
                read("/work/proj/config/thresholds.json", THRESHOLDS),
            )
        ],
        ready=True,
        replay=Replay(
            "read config/limits.json",
            {"value": "config/limits.json"},
            [read("/work/proj/config/limits.json", "{}")],
            [{"file_path": "/work/proj/config/limits.json"}],
        ),
    ),
    Case(
        "bash_built_from_an_earlier_output",
        "show what changed in the last commit",
        [
            step("Bash", {"command": "git log -1 --format=%h", "description": "last commit"}, bash("3f9c2ab\n")),
            step(
                "Bash",
                {"command": "git show --stat 3f9c2ab", "description": "what changed"},
                bash(" README.md | 2 +-\n 1 file changed"),
            ),
        ],
        ready=True,
        replay=Replay(
            "show what changed in the last commit",
            {},
            [bash("77aa0de\n"), bash("")],
            [
                {"command": "git log -1 --format=%h", "description": "last commit"},
                {"command": "git show --stat 77aa0de", "description": "what changed"},
            ],
        ),
    ),
    Case(
        "a_number_in_the_prompt",
        "list the first 5 devices in eu-west-1",
        [step("mcp__fleet__list_devices", {"region": "eu-west-1", "limit": 5}, mcp(EU[:5]))],
        ready=True,
        replay=Replay(
            "list the first 3 devices in us-east-1",
            {"region": "us-east-1", "limit": 3},
            [mcp(US[:3])],
            [{"region": "us-east-1", "limit": 3}],
        ),
    ),
    Case(
        "a_model_written_edit_is_left_out",
        "fix the typo in README.md",
        [
            step("Read", {"file_path": "/work/proj/README.md"}, read("/work/proj/README.md", "teh fleet\n")),
            step(
                "Edit",
                {"file_path": "/work/proj/README.md", "old_string": "teh", "new_string": "the"},
                json.dumps({"filePath": "/work/proj/README.md"}),
            ),
        ],
        ready=True,
        excluded=("Edit",),
        kept=1,
    ),
    Case(
        "a_commit_message_is_left_out",
        "commit the fleet changes",
        [
            step("Bash", {"command": "git status --short", "description": "status"}, bash(" M fleet.py\n")),
            step(
                "Bash",
                {"command": "git commit -am 'Fleet: retry the device list once'", "description": "commit"},
                bash("[main 1a2b3c4] Fleet: retry the device list once"),
            ),
        ],
        ready=True,
        excluded=("Bash",),
        kept=1,
    ),
    Case(
        "a_failed_step_and_a_retry",
        "read the thresholds file",
        [
            step(
                "Read",
                {"file_path": "/work/proj/thresholds.json"},
                json.dumps({"error": "File does not exist."}),
                error="File does not exist.",
            ),
            step(
                "Glob",
                {"pattern": "**/thresholds*.json"},
                json.dumps({"filenames": ["/work/proj/config/thresholds.json"], "numFiles": 1}),
            ),
            step(
                "Read",
                {"file_path": "/work/proj/config/thresholds.json"},
                read("/work/proj/config/thresholds.json", THRESHOLDS),
            ),
        ],
        ready=True,
        excluded=("Read",),
        kept=2,
        replay=Replay(
            "read the thresholds file",
            {},
            [json.dumps({"filenames": ["/srv/other/config/thresholds.json"], "numFiles": 1}), read("/x", "{}")],
            [{"pattern": "**/thresholds*.json"}, {"file_path": "/srv/other/config/thresholds.json"}],
        ),
    ),
    Case(
        "an_exploratory_search_is_left_out",
        "find where the device timeout is set",
        [
            step(
                "Grep",
                {"pattern": "deviceTimeout", "output_mode": "files_with_matches"},
                json.dumps({"mode": "files_with_matches", "filenames": [], "numFiles": 0}),
            ),
            step(
                "Grep",
                {"pattern": "device_timeout", "output_mode": "files_with_matches"},
                json.dumps({"mode": "files_with_matches", "filenames": ["/work/proj/fleet.py"], "numFiles": 1}),
            ),
        ],
        ready=True,
        excluded=("Grep",),
        kept=1,
    ),
    Case(
        "hostile_values_stay_data",
        "run the banner script",
        [step("mcp__shell__run", {"script": "banner", "args": [HOSTILE], "env": {"</script>": "`${x}`"}}, mcp("ok"))],
        ready=True,
        replay=Replay(
            "run the banner script",
            {"script": "banner"},
            [mcp("ok")],
            [{"script": "banner", "args": [HOSTILE], "env": {"</script>": "`${x}`"}}],
        ),
    ),
    Case(
        "hostile_field_names_on_an_output_path",
        "show the detail of the only device in eu-west-1",
        [
            step("mcp__fleet__list_devices", {"region": "eu-west-1"}, mcp([{'id"); throw 1; ("': "dev-777"}])),
            step("mcp__fleet__get_device", {"id": "dev-777"}, mcp({"id": "dev-777"})),
        ],
        ready=True,
        replay=Replay(
            "show the detail of the only device in us-east-1",
            {"region": "us-east-1"},
            [mcp([{'id"); throw 1; ("': "dev-888"}]), mcp({})],
            [{"region": "us-east-1"}, {"id": "dev-888"}],
        ),
    ),
    Case(
        "a_transformation_it_cannot_see",
        "list the devices in US East",
        [step("mcp__fleet__list_devices", {"region": "us-east-1"}, mcp(US))],
        ready=False,
        reason="transformed",
    ),
    Case(
        "selector_ambiguity",
        "show the details of a device in eu-west-1",
        [
            step("mcp__fleet__list_devices", {"region": "eu-west-1"}, mcp(AMBIGUOUS)),
            step("mcp__fleet__get_device", {"id": "dev-100"}, mcp({"id": "dev-100"})),
        ],
        ready=False,
        reason="selector ambiguity",
    ),
    Case(
        "a_row_no_rule_explains",
        "show the details of a device in eu-west-1",
        [
            step("mcp__fleet__list_devices", {"region": "eu-west-1"}, mcp(MIDDLE)),
            step("mcp__fleet__get_device", {"id": "dev-201"}, mcp({"id": "dev-201"})),
        ],
        ready=False,
        reason="no rule explains",
    ),
    Case(
        "a_redacted_argument",
        "call the billing api",
        [step("mcp__billing__call", {"url": "https://billing.example/v1", "token": "[REDACTED]"}, mcp("ok"))],
        ready=False,
        reason="redacted",
    ),
    Case(
        "depends_on_a_model_written_step",
        "open a ticket for the outage and label it urgent",
        [
            step(
                "mcp__tracker__create",
                {
                    "title": "Outage",
                    "body": "The eu-west-1 gateways stopped answering at "
                    "noon and the on-call engineer restarted them by hand.",
                },
                mcp({"ticket": "TCK-31337"}),
            ),
            step("mcp__tracker__label", {"ticket": "TCK-31337", "label": "urgent"}, mcp("ok")),
        ],
        ready=False,
        reason="left out",
        excluded=("mcp__tracker__create",),
    ),
]


def ten_step_run() -> Case:
    """The bench's 10-step run, as a corpus case."""
    prompt, steps = match_corpus.ten_step_run()
    return Case("ten_steps", prompt, [{k: v for k, v in s.items() if k != "stepIndex"} for s in steps], ready=True)
