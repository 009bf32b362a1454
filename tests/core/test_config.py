"""Every BIR_* variable is read in one place, with its default and its ceiling."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from bir.core import config, log
from bir.core.config import VARIABLES, ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_an_unset_variable_takes_its_default() -> None:
    assert config.get_int("BIR_LOGIC_TIMEOUT_MS", {}) == 1000
    assert config.get_str("BIR_LOGIC_ENGINE", {}) == "v8"
    assert config.get_flag("BIR_REPLAY", {}) is None


def test_a_value_past_its_ceiling_is_brought_under_it_and_logged_once() -> None:
    captured = io.StringIO()
    log.set_stream(captured)
    try:
        env = {"BIR_PRETOOL_REPLAY_BUDGET_MS": "12345"}
        assert config.get_int("BIR_PRETOOL_REPLAY_BUDGET_MS", env) == 10_000
        assert config.get_int("BIR_PRETOOL_REPLAY_BUDGET_MS", env) == 10_000
    finally:
        log.set_stream(None)
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    clamped = [line for line in lines if line["event"] == "replay.budget_clamped"]
    assert clamped == [
        {
            "ts": clamped[0]["ts"],
            "event": "replay.budget_clamped",
            "variable": "BIR_PRETOOL_REPLAY_BUDGET_MS",
            "value": 12345,
            "ceiling": 10_000,
        }
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [("BIR_LOGIC_TIMEOUT_MS", "soon"), ("BIR_MIN_STEER_SIMILARITY", "high"), ("BIR_REPLAY", "maybe")],
)
def test_a_value_that_is_not_usable_is_an_error_naming_the_variable(name: str, value: str) -> None:
    getter = {"int": config.get_int, "float": config.get_float, "flag": config.get_flag}[VARIABLES[name].kind]
    with pytest.raises(ConfigError, match=name):
        getter(name, {name: value})


def test_a_choice_outside_its_list_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="v8, quickjs"):
        config.get_str("BIR_LOGIC_ENGINE", {"BIR_LOGIC_ENGINE": "spidermonkey"})


def test_a_value_below_its_floor_is_an_error() -> None:
    with pytest.raises(ConfigError, match="BIR_LOGIC_WORKERS"):
        config.get_int("BIR_LOGIC_WORKERS", {"BIR_LOGIC_WORKERS": "0"})


def test_bir_home_moves_the_state_folder(tmp_path: Path) -> None:
    assert config.home({"BIR_HOME": str(tmp_path)}) == tmp_path
    assert config.home({}) == Path("~/.baseinstrunner").expanduser()


def test_an_undocumented_variable_cannot_be_read() -> None:
    with pytest.raises(KeyError, match="BIR_NOT_A_THING"):
        config.get_int("BIR_NOT_A_THING", {})


def test_the_readme_table_lists_every_variable_as_the_module_documents_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert config.markdown_table() in readme


def test_no_module_reads_a_bir_variable_from_the_environment_directly() -> None:
    offenders = []
    pattern = re.compile(r"""(os\.environ(\.get)?\s*[\[(]\s*|getenv\(\s*)["']BIR_""")
    for folder in ("core", "evaluator", "proxy", "hooks"):
        for path in (ROOT / folder).glob("*.py"):
            if path.name != "config.py" and pattern.search(path.read_text(encoding="utf-8")):
                offenders.append(path.name)
    assert offenders == []


def test_validate_all_reads_every_variable_and_names_the_first_bad_one() -> None:
    config.validate_all({})
    with pytest.raises(config.ConfigError, match="BIR_STEP_TIMEOUT_MS must be a whole number"):
        config.validate_all({"BIR_STEP_TIMEOUT_MS": "abc"})
    with pytest.raises(config.ConfigError, match="BIR_LOGIC_ENGINE must be one of"):
        config.validate_all({"BIR_LOGIC_ENGINE": "spidermonkey"})


def test_settings_say_where_each_value_comes_from_and_never_show_a_secret() -> None:
    rows = {s.name: s for s in config.settings({"BIR_STEP_TIMEOUT_MS": "5000", "BIR_TOKEN": "tok-secret"})}
    assert rows["BIR_STEP_TIMEOUT_MS"] == config.Setting("BIR_STEP_TIMEOUT_MS", "5000", "60000", "environment")
    assert rows["BIR_LOGIC_WORKERS"] == config.Setting("BIR_LOGIC_WORKERS", "2", "2", "default")
    assert rows["BIR_TOKEN"].value == "(set)"
    assert "tok-secret" not in config.text_table({"BIR_TOKEN": "tok-secret"})


def test_bir_secrets_are_left_out_of_an_environment_passed_on() -> None:
    env = {"PATH": "/bin", "BIR_TOKEN": "t", "BIR_DERIVE_API_KEY": "k", "ANTHROPIC_API_KEY": "a", "BIR_HOME": "/h"}
    assert config.without_secrets(env) == {"PATH": "/bin", "ANTHROPIC_API_KEY": "a", "BIR_HOME": "/h"}


def test_bir_config_never_shows_a_url_s_userinfo() -> None:
    rows = {row.name: row for row in config.settings({"BIR_AUTH_URL": "https://me:hunter22@basein.example.com"})}
    assert rows["BIR_AUTH_URL"].value == "https://***@basein.example.com"
