"""Every BIR_* variable is read in one place, with its default and its ceiling, into one typed Settings."""

from __future__ import annotations

import ast
import io
import json
import typing
from pathlib import Path

import pytest

from bir.core import config, log
from bir.core.config import VARIABLES, ConfigError, Settings, Variable

ROOT = Path(__file__).resolve().parents[2]


def test_an_unset_variable_takes_its_default() -> None:
    settings = config.load({})
    assert settings.logic_timeout_ms == 1000
    assert settings.logic_engine == "v8"
    assert settings.replay is None


def test_a_value_past_its_ceiling_is_brought_under_it_and_logged_once() -> None:
    captured = io.StringIO()
    log.set_stream(captured)
    try:
        env = {"BIR_PRETOOL_REPLAY_BUDGET_MS": "12345"}
        assert config.load(env).pretool_replay_budget_ms == 10_000
        assert config.load(env).pretool_replay_budget_ms == 10_000
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
    with pytest.raises(ConfigError, match=name):
        config.load({name: value})


def test_a_choice_outside_its_list_is_an_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="v8, quickjs"):
        config.load({"BIR_LOGIC_ENGINE": "spidermonkey"})


def test_a_value_below_its_floor_is_an_error() -> None:
    with pytest.raises(ConfigError, match="BIR_LOGIC_WORKERS"):
        config.load({"BIR_LOGIC_WORKERS": "0"})


def test_bir_home_moves_the_state_folder(tmp_path: Path) -> None:
    assert config.home({"BIR_HOME": str(tmp_path)}) == tmp_path
    assert config.load({"BIR_HOME": str(tmp_path)}).home == tmp_path
    assert config.home({}) == Path("~/.baseinstrunner").expanduser()


def test_bir_off_alone_reads_as_the_settings_read_it() -> None:
    assert config.off({"BIR_OFF": "yes"}) is config.load({"BIR_OFF": "yes"}).off is True
    assert config.off({}) is False
    with pytest.raises(ConfigError, match="BIR_OFF"):
        config.off({"BIR_OFF": "perhaps"})


def _expected_type(var: Variable) -> object:
    kinds: dict[str, object] = {
        "int": int,
        "float": float,
        "flag": bool,
        "str": str,
        "path": Path,
        "list": tuple[str, ...],
    }
    base = typing.Literal[var.choices] if var.kind == "choice" else kinds[var.kind]
    return base if var.default is not None else base | None  # type: ignore[operator]


def _typed_fields() -> dict[str, object]:
    """The fields of the ``Settings`` mypy checks against (``_Fields`` under ``TYPE_CHECKING``), each
    with its annotation evaluated."""
    tree = ast.parse((ROOT / "core" / "config.py").read_text(encoding="utf-8"))
    (typed,) = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "_Fields"]
    names = {"Path": Path, "Literal": typing.Literal}
    return {
        node.target.id: eval(ast.unparse(node.annotation), names)
        for node in typed.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def test_the_settings_have_one_field_per_variable_in_order_typed_by_its_kind_and_default() -> None:
    typed = _typed_fields()
    names = [config.field_name(var) for var in VARIABLES.values()]
    assert list(Settings._fields) == names
    assert [f for f in names if f not in typed] == [], "a variable in the table has no field in _Fields"
    assert [f for f in typed if f not in names] == [], "a field in _Fields has no variable in the table"
    assert list(typed) == names, "the fields of _Fields are not in the table's order"
    wrong = {
        var.name: (typed[config.field_name(var)], _expected_type(var))
        for var in VARIABLES.values()
        if typed[config.field_name(var)] != _expected_type(var)
    }
    assert wrong == {}, "annotated type, expected type"


def test_every_default_is_of_its_field_s_type() -> None:
    settings = config.load({})
    for var, value in zip(VARIABLES.values(), settings, strict=True):
        expected = _expected_type(var)
        origin = typing.get_origin(expected)
        if origin is typing.Literal:
            assert value in typing.get_args(expected), var.name
        elif var.default is None:
            assert value is None, var.name
        else:
            assert isinstance(value, origin or expected), var.name  # type: ignore[arg-type]


def test_a_settings_repr_never_shows_a_secret_or_a_url_s_userinfo() -> None:
    shown = repr(config.load({"BIR_TOKEN": "tok-secret", "BIR_AUTH_URL": "https://me:hunter22@basein.example.com"}))
    assert "tok-secret" not in shown
    assert "hunter22" not in shown
    assert "token='(set)'" not in shown
    assert "token=(set)" in shown


def test_numbers_given_programmatically_are_brought_under_their_ceiling_and_floor() -> None:
    given = config.load({})._replace(logic_workers=100, logic_budget_margin=500.0)
    bounded = config.bounded(given)
    assert (bounded.logic_workers, bounded.logic_budget_margin) == (32, 100.0)
    with pytest.raises(ConfigError, match="BIR_LOGIC_WORKERS"):
        config.bounded(given._replace(logic_workers=0))


def test_the_readme_table_lists_every_variable_as_the_module_documents_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert config.markdown_table() in readme


def _product_files() -> list[Path]:
    files = [ROOT / "cli.py"]
    for folder in ("core", "evaluator", "hooks", "proxy", "benchmarks"):
        files += sorted(path for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts)
    return [path for path in files if path != ROOT / "core" / "config.py"]


def _names_a_variable(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("BIR_")


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)


def _called_name(func: ast.expr) -> tuple[str | None, str | None]:
    """A call's (owner, name): ``config.get_str`` is ("config", "get_str"), ``getenv`` (None, "getenv")."""
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ast.unparse(func.value)
        return owner, func.attr
    return None, None


def _lookups_by_name(tree: ast.AST, from_config: set[str], *, environ_too: bool = True) -> list[str]:
    """Each place ``tree`` reads a ``BIR_*`` variable by its name: a call into ``config`` (or a name imported
    from it) given a ``"BIR_…"`` string, a private reader of ``config``, or (``environ_too``)
    ``os.environ[…]``/``.get``/``.pop`` or ``getenv`` of one."""
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "config"
            and node.attr.startswith("_")
        ):
            found.append(f"line {node.lineno}: config.{node.attr}")
        if (
            environ_too
            and isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value)
            and _names_a_variable(node.slice)
        ):
            found.append(f"line {node.lineno}: os.environ[...]")
        if not isinstance(node, ast.Call) or not any(_names_a_variable(arg) for arg in node.args):
            continue
        owner, name = _called_name(node.func)
        into_config = owner == "config" or (owner is None and name in from_config)
        environ = owner == "os.environ" and name in ("get", "pop")
        if into_config or (environ_too and (environ or name == "getenv")):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
    return found


def _imported_from_config(tree: ast.AST) -> set[str]:
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "bir.core.config"
        for alias in node.names
    }


def test_no_module_looks_a_bir_variable_up_by_its_name() -> None:
    offenders: dict[str, list[str]] = {}
    for path in _product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # The benchmarks start whole systems and may pass BIR_HOME on to them; they never read a setting so.
        found = _lookups_by_name(
            tree, _imported_from_config(tree), environ_too=path.relative_to(ROOT).parts[0] != "benchmarks"
        )
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, "read it from the Settings the composition root passes down"


def test_the_name_lookup_rule_sees_every_way_of_reading_a_variable() -> None:
    source = (
        'config._int(config.VARIABLES["BIR_X"], None)\n'
        'config.get_str("BIR_X")\n'
        'os.environ["BIR_X"]\n'
        'os.environ.get("BIR_X")\n'
        'os.getenv("BIR_X")\n'
        'reader("BIR_X")\n'
        'os.environ["BIR_X"] = "set for a child"\n'
        'print("BIR_X")\n'
    )
    found = _lookups_by_name(ast.parse(source), {"reader"})
    assert sorted(int(line.split(":")[0].removeprefix("line ")) for line in found) == [1, 2, 3, 4, 5, 6]


def test_load_reads_every_variable_and_names_the_first_bad_one() -> None:
    config.load({})
    with pytest.raises(config.ConfigError, match="BIR_STEP_TIMEOUT_MS must be a whole number"):
        config.load({"BIR_STEP_TIMEOUT_MS": "abc", "BIR_SCENARIO_DEBUG": "maybe"})
    with pytest.raises(config.ConfigError, match="BIR_LOGIC_ENGINE must be one of"):
        config.load({"BIR_LOGIC_ENGINE": "spidermonkey"})


def test_a_lenient_load_reads_a_bad_value_as_unset_and_names_every_bad_one() -> None:
    settings, bad = config.load_lenient({"BIR_STEP_TIMEOUT_MS": "abc", "BIR_SCENARIO_DEBUG": "maybe"})
    assert (settings.step_timeout_ms, settings.scenario_debug) == (60_000, False)
    assert [name for name, _ in bad] == ["BIR_STEP_TIMEOUT_MS", "BIR_SCENARIO_DEBUG"]
    assert config.invalid_variables({"BIR_SCENARIO_DEBUG": "maybe"})[0][0] == "BIR_SCENARIO_DEBUG"


def test_settings_say_where_each_value_comes_from_and_never_show_a_secret() -> None:
    rows = {s.name: s for s in config.rows({"BIR_STEP_TIMEOUT_MS": "5000", "BIR_TOKEN": "tok-secret"})}
    assert rows["BIR_STEP_TIMEOUT_MS"] == config.Setting("BIR_STEP_TIMEOUT_MS", "5000", "60000", "environment")
    assert rows["BIR_LOGIC_WORKERS"] == config.Setting("BIR_LOGIC_WORKERS", "2", "2", "default")
    assert rows["BIR_TOKEN"].value == "(set)"
    assert "tok-secret" not in config.text_table({"BIR_TOKEN": "tok-secret"})


def test_bir_secrets_are_left_out_of_an_environment_passed_on() -> None:
    env = {"PATH": "/bin", "BIR_TOKEN": "t", "BIR_DERIVE_API_KEY": "k", "ANTHROPIC_API_KEY": "a", "BIR_HOME": "/h"}
    assert config.without_secrets(env) == {"PATH": "/bin", "ANTHROPIC_API_KEY": "a", "BIR_HOME": "/h"}


def test_bir_config_never_shows_a_url_s_userinfo() -> None:
    rows = {row.name: row for row in config.rows({"BIR_AUTH_URL": "https://me:hunter22@basein.example.com"})}
    assert rows["BIR_AUTH_URL"].value == "https://***@basein.example.com"
