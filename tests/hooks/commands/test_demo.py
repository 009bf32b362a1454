"""``bir demo``, the README's main job: the whole loop in a home of its own, as a person runs it.

It runs for real here (a control server on the local service, ``bir-hook`` processes, a ``bir-proxy``
over the demo fleet server, ``bir-scenario``, V8 workers); ``tests/test_wheel.py`` runs it from the
installed wheel. The user's own settings are in the environment on purpose: a configured service, the
runner off, replay off. None of them may reach the demo, and each must be there again after it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from bir.cli import main
from bir.examples.fleet_server import list_devices_in
from bir.hooks.commands.demo import _picked, _step_outputs

pytestmark = pytest.mark.timeout(240)


def test_the_demo_records_calculates_replays_by_slot_and_books_the_saving_in_a_home_it_keeps_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Its temporary folder (kept here, to read it after) is the test's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    users = {"BIR_AUTH_URL": "http://127.0.0.1:9", "BIR_OFF": "1", "BIR_REPLAY": "0"}
    for name, value in users.items():
        monkeypatch.setenv(name, value)
    own_home = Path(os.environ["BIR_HOME"])

    assert main(["demo", "--keep"]) == 0
    captured = capfd.readouterr()
    said = captured.out
    # A command talks: the servers' log lines went to the demo's own log files, on no terminal.
    assert '"event"' not in said
    assert '"event"' not in captured.err
    [kept] = re.findall(r"^Kept (\S+)\. To look inside", said, flags=re.MULTILINE)
    assert Path(kept).parent == tmp_path.resolve()
    riskiest = max(list_devices_in("us-east-1"), key=lambda row: row["risk"])
    for stage in (
        '2. Turn one: "find the riskiest device in eu-west-1 and show its details"',
        "no scenario matches (the store is empty): bir records the turn",
        'the model calls mcp__fleet__list_devices {"region": "eu-west-1"} -> 8 devices',
        ": ready. A dry replay in the V8 sandbox",
        "its output gives s0_id: the row with the highest 'risk'",
        'by the slot rule, {"region": "us-east-1"}',
        f'get_device {{"id": "{riskiest["id"]}"}} -> {riskiest["name"]}, risk {riskiest["risk"]}',
        "5. Booked steered_full, once, on its ticket.",
    ):
        assert stage in said, f"{stage!r} not in:\n{said}"

    # The user's environment is as it was, and nothing was written to the user's home.
    for name, value in users.items():
        assert os.environ[name] == value
    assert os.environ["BIR_HOME"] == str(own_home)
    assert not (own_home / "local").exists()

    # What the demo booked is in its own store, and `bir stats` on that home reads it.
    monkeypatch.setenv("BIR_HOME", str(Path(kept) / "home"))
    monkeypatch.setenv("BIR_SERVICE", "local")
    assert main(["stats", "--json"]) == 0
    [line] = json.loads(capfd.readouterr().out)["scenarios"]
    assert line["state"] == "ready"
    assert line["outcomes"] == {"steered_full": 1}
    assert line["savedTokens"] > 0
    assert line["savedUsd"] > 0
    calls = [json.loads(x) for x in (Path(kept) / "fleet-calls.jsonl").read_text().splitlines()]
    assert [(c["tool"], c["arguments"].get("region"), c["arguments"].get("id")) for c in calls] == [
        ("list_devices", "eu-west-1", None),
        ("get_device", None, max(list_devices_in("eu-west-1"), key=lambda row: row["risk"])["id"]),
        ("list_devices", "us-east-1", None),
        ("get_device", None, riskiest["id"]),
    ]


def test_run_scenarios_answer_reads_back_as_one_output_per_step() -> None:
    answer = (
        '### Step 1/2 — mcp__fleet__list_devices\narguments: {"region":"us-east-1"}\n[1, 2]\n\n'
        '### Step 2/2 — mcp__fleet__get_device\narguments: {"id":"dev-006"}\n{"name": "x", "risk": 84}\n\n'
        "The scenario's response model (values it computed from these results for your answer):\n{}"
    )
    assert _step_outputs(answer) == ["[1, 2]", '{"name": "x", "risk": 84}']
    assert _step_outputs("no steps ran") == []


def test_a_pick_by_the_highest_field_is_said_and_other_bodies_say_nothing() -> None:
    body = 'var __root = 1;\nreturn {"s0_id": __need(__pick(__json(x), "max", "risk", "w"), "id", "w")};'
    assert _picked(body) == "s0_id: the row with the highest 'risk'"
    assert _picked("return {};") is None
    assert _picked(None) is None
