"""Every example in every command's and subcommand's ``--help`` runs, as printed, on a new user's machine
with the wheel installed and the demo fleet (``tests/sandbox.py``), and exits as its help says.

The commands are found the way a person finds them (``bir --help``, then each one's own), the examples
read from the help text, and each runs through a shell in the project, in the order the help lists them,
with what a person has at hand: the project installed with ``bir install --replay``, signed in to a
BaseIn service (a fake one on loopback, seeded with a run of the packaged ``fleet-direct`` scenario),
``BASEIN_URL`` and ``BASEIN_TOKEN`` set for the login example. The examples that take something away
(sign out, uninstall) run last; one that follows a log runs until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bir.benchmarks.serving import serve_in_thread
from tests.fakes.baseinsvc import FakeBaseIn
from tests.paths import REPO
from tests.sandbox import Sandbox
from tests.wheel import WHEEL_TEST_TIMEOUT_S

pytestmark = pytest.mark.timeout(WHEEL_TEST_TIMEOUT_S + 900)

CHOICES = re.compile(r"\{([a-z][a-z,-]*)\}")
# Examples that take away what later ones need run after all the others: signing out (the local service is
# then the one in use, where the run is recorded too, for the examples that read the local store), then
# the uninstalls.
AFTER_LOGOUT = ("bir scenario match", "bir scenario forget", "bir stats", "bir learn")
LAST = ("bir uninstall --replay", "bir uninstall")
FOLLOW_S = 3.0
EXAMPLE_TIMEOUT_S = 300.0


def help_of(demo: Sandbox, words: list[str]) -> str:
    done = demo.bir(*words, "--help")
    assert done.returncode == 0, (words, done.stderr)
    return done.stdout


def subcommands(help_text: str) -> list[str]:
    """The choices of the first ``{a,b,c}`` in a help's usage, if any."""
    usage = help_text.split("\n\n", 1)[0]
    found = CHOICES.search(usage)
    return found.group(1).split(",") if found else []


def examples_in(help_text: str) -> list[str]:
    lines = help_text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() in ("example:", "examples:"):
            for follow in lines[i + 1 :]:
                if not follow.strip():
                    break
                out.append(follow.strip())
    return out


def every_command(demo: Sandbox) -> list[tuple[list[str], list[str]]]:
    """Each command and subcommand, as words, with the examples its help shows (walked from ``bir --help``)."""
    found: list[tuple[list[str], list[str]]] = []
    pending = [[name] for name in subcommands(help_of(demo, []))]
    while pending:
        words = pending.pop(0)
        text = help_of(demo, words)
        found.append((words, examples_in(text)))
        # A command's own subcommands (bench eval, scenario show); replay's switches are its examples.
        if words[0] in ("bench", "scenario") and len(words) == 1:
            pending[0:0] = [[*words, name] for name in subcommands(text)]
    return found


PROMPT = "find the riskiest device in eu-west-1"


def recorded_steps() -> list[dict[str, Any]]:
    """The two tool calls of one run of the fleet-direct scenario, as they were recorded."""
    from bir.examples.fleet_server import device_by_id, list_devices_in

    rows = list_devices_in("eu-west-1", 200)
    riskiest = max(rows, key=lambda row: row["risk"])

    def text(value: object) -> str:
        return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})

    return [
        {
            "stepIndex": 0,
            "toolName": "mcp__fleet__list_devices",
            "toolInput": {"region": "eu-west-1", "limit": 200},
            "toolOutput": text(rows),
        },
        {
            "stepIndex": 1,
            "toolName": "mcp__fleet__get_device",
            "toolInput": {"id": riskiest["id"]},
            "toolOutput": text(device_by_id(riskiest["id"])),
        },
    ]


def seeded_service() -> FakeBaseIn:
    """The BaseIn service as it is for someone who ran the packaged fleet-direct scenario once (run_fleet)."""
    fake = FakeBaseIn()
    scenario: dict[str, Any] = json.loads((REPO / "examples" / "scenarios" / "fleet-direct.json").read_text())
    fake.add_owned_run("run_fleet", {**scenario, "id": "scn_fleet"})
    fake.add_run("run_fleet", recorded_steps())
    fake.dry_derived["scn_fleet"] = {"region": "eu-west-1"}
    return fake


async def record_locally(project: Path) -> None:
    """The same run, recorded in the local store (as a session on the local service records it)."""
    from bir.evaluator import EvaluatorPool
    from bir.hooks.local import local_client

    async with EvaluatorPool(workers=1) as pool, local_client(project=project, pool=pool, load_model=False) as client:
        assert await client.match("run_fleet", PROMPT, {}) is None
        for step in recorded_steps():
            await client.post_step("run_fleet", step)
        await client.finish_run("run_fleet", {"output": "dev-009 is the riskiest"})
        status, _ = await client.request(
            "POST", "/recordings/runs/run_fleet/calculate", route="calculate", json_body={}
        )
        assert status in (200, 202)


@pytest.fixture
def signed_in(demo: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBaseIn]:
    monkeypatch.setenv("BIR_HOME", str(demo.bir_home))
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    anyio.run(record_locally, demo.project)
    fake = seeded_service()
    with serve_in_thread(fake.app, fake.releaser) as url:
        fake.url = url
        for step in (
            demo.bir("install", "--replay"),
            demo.bir("login", "--url", url, stdin=fake.token + "\n"),
        ):
            assert step.returncode == 0, step.stderr
        yield fake


def run_example(demo: Sandbox, line: str, env: dict[str, str]) -> tuple[int, str]:
    """Run one example line; its exit status and what it printed (both streams)."""
    if follows(line):
        # It follows until Ctrl-C: let it follow a moment, then press it.
        process = demo.spawn(
            ["bash", "-c", line], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(FOLLOW_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        return process.returncode, out
    done = demo.shell(line, env=env, timeout=EXAMPLE_TIMEOUT_S)
    return done.returncode, done.stdout + done.stderr


def follows(line: str) -> bool:
    return bool({"-f", "--follow"} & set(line.split()))


def expected_code(line: str) -> int:
    # Following a log ends with Ctrl-C, which every bir command answers with 130.
    return 130 if follows(line) else 0


def test_every_help_example_runs_on_the_demo_fleet_and_exits_as_its_help_says(
    demo: Sandbox, signed_in: FakeBaseIn
) -> None:
    commands = every_command(demo)
    missing = [" ".join(words) for words, examples in commands if not examples]
    assert missing == [], f"commands whose help shows no example: {missing}"
    without_codes = [" ".join(w) for w, _ in commands if "exit codes:" not in help_of(demo, w)]
    assert without_codes == [], f"commands whose help shows no exit codes: {without_codes}"

    lines: list[str] = []
    for _, examples in commands:
        lines += [line for line in examples if line not in lines]
    assert all(line.startswith(("bir ", "echo ", "printf ")) for line in lines), lines
    late = [line for line in lines if line.startswith(AFTER_LOGOUT)]
    first = [line for line in lines if line not in (*LAST, *late, "bir logout")]
    ordered = [*first, "bir logout", *late, *[line for line in LAST if line in lines]]
    assert sorted(ordered) == sorted(lines)
    env = {"BASEIN_URL": signed_in.url, "BASEIN_TOKEN": signed_in.token}
    failures = []
    for line in ordered:
        code, out = run_example(demo, line, env)
        if code != expected_code(line) or "Traceback" in out:
            failures.append(f"{line}\n  exited {code}, expected {expected_code(line)}:\n{out[-1500:]}")
    assert failures == [], "\n\n".join(failures)
    assert len(ordered) >= 40
