"""Every ``BIR_*`` variable bir reads: its default, its ceiling and one line of documentation.

Nothing else in bir reads ``os.environ`` for a ``BIR_*`` name. A number past its ceiling is brought
under it and logged once as ``replay.budget_clamped``; a value that is not a number raises
``ConfigError`` naming the variable (the CLI turns it into a one-line error, never a traceback).
The README's table is generated from ``VARIABLES`` (``bir config --markdown``) and a test keeps the two
in step.
"""

from __future__ import annotations

import _thread
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, Literal, NamedTuple

from bir.core.secret_values import register_secret_variables

# No dataclasses and no logging on import: `bir-hook` imports this module at every tool call, and
# `dataclasses` (with `inspect`) and the logger cost it milliseconds each (see `bir bench pin`).

Kind = Literal["int", "float", "flag", "str", "path", "choice", "list"]


class ConfigError(ValueError):
    """A ``BIR_*`` variable holds a value bir cannot use. The message names the variable."""


class Variable(NamedTuple):
    name: str
    kind: Kind
    default: int | float | bool | str | None
    doc: str
    ceiling: int | float | None = None
    floor: int | float | None = None
    choices: tuple[str, ...] = ()
    # A secret is never passed on to a process bir starts (a proxy, an upstream server).
    secret: bool = False


_VARS: tuple[Variable, ...] = (
    Variable("BIR_HOME", "path", "~/.baseinstrunner", "Where bir keeps its state (control files, tmp, logs)."),
    # The evaluator
    Variable(
        "BIR_LOGIC_TIMEOUT_MS",
        "int",
        1000,
        "Time limit of one logic body, in the isolate; the supervisor kills the worker shortly after.",
        ceiling=10_000,
        floor=1,
    ),
    Variable(
        "BIR_LOGIC_MEMORY_MB",
        "int",
        64,
        "Memory limit of one logic body: V8's heap limit, and the worker's RSS growth watched by the supervisor.",
        ceiling=2048,
        floor=8,
    ),
    Variable("BIR_LOGIC_WORKERS", "int", 2, "Evaluator worker processes in a pool.", ceiling=32, floor=1),
    Variable(
        "BIR_LOGIC_MAX_JOBS",
        "int",
        2000,
        "Jobs a worker runs before it is replaced (with up to 10% jitter).",
        ceiling=1_000_000,
        floor=1,
    ),
    Variable(
        "BIR_LOGIC_BUDGET_MARGIN",
        "float",
        2.0,
        "Most jobs a worker runs, as a multiple of its BIR_LOGIC_MAX_JOBS budget, while its replacement is "
        "still starting; past it the worker's next job waits for the replacement.",
        ceiling=100.0,
        floor=1.0,
    ),
    Variable(
        "BIR_LOGIC_WALLS",
        "flag",
        True,
        "`0` starts the evaluator's workers without the kernel's walls (Landlock, seccomp, no_new_privs): "
        "for diagnosis only.",
    ),
    Variable(
        "BIR_LOGIC_QUEUE",
        "int",
        4096,
        "Jobs a pool holds waiting for a worker before it answers `overloaded`.",
        ceiling=1_000_000,
        floor=1,
    ),
    Variable(
        "BIR_LOGIC_ENGINE",
        "choice",
        "v8",
        "Engine of the logic workers: `v8` (mini-racer) or `quickjs` (dukpy).",
        choices=("v8", "quickjs"),
    ),
    Variable(
        "BIR_LOGIC_ENGINE_SURFACE",
        "choice",
        "auto",
        "For tests: `public` runs the logic workers on their engine library's public API, the slower "
        "fallback taken when mini-racer's or dukpy's private surface moved.",
        choices=("auto", "public"),
    ),
    # Replay (spec §10, §13.2)
    Variable("BIR_REPLAY", "flag", None, "`0` turns replay off; unset, the project's stored switch decides."),
    Variable("BIR_OFF", "flag", False, "`1` takes the whole runner out of the way for a session."),
    Variable(
        "BIR_MIN_STEER_SIMILARITY", "float", 0.92, "Lowest match similarity that steers a turn.", ceiling=1.0, floor=0.0
    ),
    Variable(
        "BIR_REPLAY_RECORDED_OUTPUTS",
        "flag",
        False,
        "`1` lets a step that cannot be sent stand on its recorded output, marked `(recorded)`.",
    ),
    Variable(
        "BIR_REPLAY_ALLOW_SERVERS",
        "list",
        None,
        "Comma-separated server keys bir may call by itself "
        "(direct runs, divergence); unset means every wrapped server.",
    ),
    Variable(
        "BIR_CORRELATION_DECISION",
        "choice",
        "none",
        "`allow` or `ask`: ordinary wrapped MCP calls carry a call id, answered with that decision "
        "(never in plan mode); `none`: only pinned steps and bypassPermissions sessions do.",
        choices=("none", "allow", "ask"),
    ),
    Variable(
        "BIR_STEP_TIMEOUT_MS",
        "int",
        60_000,
        "Time limit of one direct step, clipped to what the plan has left.",
        ceiling=290_000,
        floor=100,
    ),
    Variable(
        "BIR_REPLAY_PLAN_BUDGET_MS", "int", 100_000, "Time budget of a whole direct run.", ceiling=270_000, floor=1000
    ),
    Variable(
        "BIR_REPLAY_BUDGET_MS",
        "int",
        None,
        "Overrides BIR_REPLAY_PLAN_BUDGET_MS where set.",
        ceiling=270_000,
        floor=1000,
    ),
    Variable(
        "BIR_DERIVE_BUDGET_MS",
        "int",
        8000,
        "How long a direct run waits for parameter derivation.",
        ceiling=60_000,
        floor=100,
    ),
    Variable(
        "BIR_HOOK_DERIVE_BUDGET_MS",
        "int",
        4000,
        "How long a hook waits for parameter derivation.",
        ceiling=6000,
        floor=100,
    ),
    Variable(
        "BIR_PRETOOL_REPLAY_BUDGET_MS", "int", 9000, "All replay work inside one PreToolUse.", ceiling=10_000, floor=100
    ),
    Variable(
        "BIR_MATCH_BUDGET_MS", "int", 1500, "How long a prompt waits for the service's match.", ceiling=6000, floor=50
    ),
    Variable(
        "BIR_MATCH_SLOW_MS",
        "int",
        800,
        "A match slower than this holds prompts off the match gate.",
        ceiling=6000,
        floor=50,
    ),
    Variable(
        "BIR_SERVICE_TIMEOUT_MS",
        "int",
        5000,
        "Timeout of one request to the BaseIn service.",
        ceiling=60_000,
        floor=100,
    ),
    Variable(
        "BIR_SCENARIO_RUN_TIMEOUT_MS",
        "int",
        290_000,
        "How long bir-scenario waits for /scenario/run.",
        ceiling=290_000,
        floor=1000,
    ),
    Variable("BIR_SCENARIO_DEBUG", "flag", False, "`1` makes run_scenario return raw reasons as isError."),
    Variable(
        "BIR_SCENARIO_TOOLS",
        "choice",
        None,
        "`read` makes bir-scenario list its reading tools (`scenario_show`, `scenario_edits`, `investigate`) "
        "without `bir scenario editing on`.",
        choices=("read",),
    ),
    Variable(
        "BIR_SCENARIO_MAX_OUTPUT_CHARS",
        "int",
        24_000,
        "Longest answer of one bir-scenario scenario tool, in characters.",
        ceiling=1_000_000,
        floor=1000,
    ),
    Variable(
        "BIR_READ_TIMEOUT_MS",
        "int",
        15_000,
        "Timeout of one reading `bir scenario` request to the service; "
        "bir-scenario's reading tools give up 10 s later.",
        ceiling=60_000,
        floor=100,
    ),
    Variable("BIR_AUTH_URL", "str", None, "Base URL of the BaseIn service."),
    # The local service (issue 18)
    Variable(
        "BIR_SERVICE",
        "choice",
        None,
        "`local` or `remote` forces which service bir uses; unset, the local one unless a service is configured.",
        choices=("local", "remote"),
    ),
    Variable(
        "BIR_LOCAL_STORE_MB",
        "int",
        256,
        "Size of the local store's recorded data past which its oldest runs are pruned, in MB.",
        ceiling=100_000,
        floor=1,
    ),
    Variable(
        "BIR_LOCAL_MATCH_SCOPE",
        "choice",
        "project",
        "`user` lets the local service match a prompt against every project's scenarios, not only its own.",
        choices=("project", "user"),
    ),
    Variable(
        "BIR_LOCAL_EMBED_MIN_SIMILARITY",
        "float",
        0.92,
        "Lowest cosine of two masked prompts for the local service's embedding rule (paraphrases); below "
        "BIR_MIN_STEER_SIMILARITY a hit would arm nothing and record nothing.",
        ceiling=1.0,
        floor=0.5,
    ),
    Variable(
        "BIR_LOCAL_MIN_RUNS",
        "int",
        1,
        "Agreeing recorded runs a local scenario must rest on before it is replayed (a second run settles "
        "what one cannot: which values are parameters, which row rule was meant).",
        ceiling=8,
        floor=1,
    ),
    Variable(
        "BIR_LOCAL_MODEL_MAX_USD",
        "float",
        0.02,
        "Most the model-pass calls of the local service for one run may cost together, in dollars (its "
        "match confirmation and its calculation; only with BIR_DERIVE_API_KEY); 0 leaves them uncapped.",
        ceiling=1.0,
        floor=0.0,
    ),
    Variable("BIR_TOKEN", "str", None, "Bearer token for the BaseIn service (else the stored sign-in).", secret=True),
    Variable("BIR_DERIVE_API_KEY", "str", None, "Anthropic API key used only for parameter derivation.", secret=True),
    Variable("BIR_USE_ANTHROPIC_API_KEY", "flag", False, "`1` lets derivation use ANTHROPIC_API_KEY."),
    Variable("BIR_DERIVE_MODEL", "str", "claude-haiku-4-5-20251001", "Model of the derivation call."),
    Variable(
        "BIR_CONTROL_IDLE_MS",
        "int",
        1_800_000,
        "A control server that has heard from no hook, no proxy and no `bir` server for this long exits "
        "(the next hook revives it); `0` keeps it running.",
        ceiling=604_800_000,
        floor=0,
    ),
    Variable(
        "BIR_SERVER_NAME",
        "str",
        None,
        "Server key a `bir-proxy` registers under when `--server-name` is not given (else from the command).",
    ),
)

VARIABLES: Mapping[str, Variable] = {v.name: v for v in _VARS}
SECRETS: frozenset[str] = frozenset(v.name for v in _VARS if v.secret)
register_secret_variables(SECRETS)

_clamped_lock = _thread.allocate_lock()
_clamped_logged: set[tuple[str, str]] = set()


def _variable(name: str) -> Variable:
    try:
        return VARIABLES[name]
    except KeyError:
        raise KeyError(f"{name} is not a documented BIR_* variable (add it to bir.core.config)") from None


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _bound(var: Variable, value: float) -> float:
    if var.ceiling is not None and value > var.ceiling:
        key = (var.name, repr(value))
        with _clamped_lock:
            first = key not in _clamped_logged
            _clamped_logged.add(key)
        if first:
            from bir.core.log import log_event

            log_event("replay.budget_clamped", variable=var.name, value=value, ceiling=var.ceiling)
        return var.ceiling
    if var.floor is not None and value < var.floor:
        raise ConfigError(f"{var.name}={value!r} is below its minimum of {var.floor}")
    return value


def get_int(name: str, env: Mapping[str, str] | None = None) -> int | None:
    var = _variable(name)
    raw = _raw(name, env)
    if raw is None:
        return None if var.default is None else int(var.default)
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw[:80]!r}") from None
    return int(_bound(var, value))


def get_float(name: str, env: Mapping[str, str] | None = None) -> float | None:
    var = _variable(name)
    raw = _raw(name, env)
    if raw is None:
        return None if var.default is None else float(var.default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw[:80]!r}") from None
    return float(_bound(var, value))


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def get_flag(name: str, env: Mapping[str, str] | None = None) -> bool | None:
    var = _variable(name)
    raw = _raw(name, env)
    if raw is None:
        return None if var.default is None else bool(var.default)
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0, got {raw[:80]!r}")


def get_str(name: str, env: Mapping[str, str] | None = None) -> str | None:
    var = _variable(name)
    raw = _raw(name, env)
    if raw is None:
        return None if var.default is None else str(var.default)
    if var.choices and raw.lower() not in var.choices:
        raise ConfigError(f"{name} must be one of {', '.join(var.choices)}, got {raw[:80]!r}")
    return raw.lower() if var.choices else raw


def get_list(name: str, env: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    _variable(name)
    raw = _raw(name, env)
    if raw is None:
        return None
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def require_int(name: str, env: Mapping[str, str] | None = None) -> int:
    """An int variable that has a default, as a plain int."""
    value = get_int(name, env)
    if value is None:
        raise KeyError(f"{name} has no default")
    return value


def home(env: Mapping[str, str] | None = None) -> Path:
    """``BIR_HOME``, or ``~/.baseinstrunner``."""
    raw = _raw("BIR_HOME", env)
    return Path(raw if raw is not None else "~/.baseinstrunner").expanduser()


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` minus bir's own secrets (``SECRETS``): what a process bir starts is given.

    ``ANTHROPIC_API_KEY`` is kept: a host merges a server entry's own ``env`` into the one it passes,
    so a proxy cannot tell a key the entry set for its server from one it merely inherited.
    """
    return {name: value for name, value in env.items() if name not in SECRETS}


def clamp(name: str, value: float) -> float:
    """Bring a programmatic value (e.g. a constructor argument) under the variable's ceiling."""
    return _bound(_variable(name), value)


_READERS: Final[Mapping[Kind, Callable[[str, Mapping[str, str] | None], object]]] = {
    "int": get_int,
    "float": get_float,
    "flag": get_flag,
    "str": get_str,
    "choice": get_str,
    "list": get_list,
    "path": lambda name, env: home(env) if name == "BIR_HOME" else _raw(name, env),
}


def value_of(var: Variable, env: Mapping[str, str] | None = None) -> object:
    """The value of ``var`` in effect, read the way bir reads it.

    Raises:
        ConfigError: the variable holds a value bir cannot use.
    """
    return _READERS[var.kind](var.name, env)


def validate_all(env: Mapping[str, str] | None = None) -> None:
    """Read every ``BIR_*`` variable once, so a bad value stops a command before any network call.

    Raises:
        ConfigError: the first variable (in ``VARIABLES`` order) holding a value bir cannot use.
    """
    for var in _VARS:
        value_of(var, env)


def invalid_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, ConfigError]]:
    """Every ``BIR_*`` variable holding a value bir cannot use, with its error (``bir doctor`` lists them)."""
    found: list[tuple[str, ConfigError]] = []
    for var in _VARS:
        try:
            value_of(var, env)
        except ConfigError as exc:
            found.append((var.name, exc))
    return found


class Setting(NamedTuple):
    """One row of ``bir config``: the value in effect (``(set)`` for a secret), its default, where it comes from."""

    name: str
    value: str
    default: str
    source: Literal["environment", "default"]


def settings(env: Mapping[str, str] | None = None) -> list[Setting]:
    """Every variable as ``bir config`` shows it; a value bir cannot use is shown with its error.

    Secrets are never shown, only whether they are set, and a URL never with its userinfo.
    """
    from bir.core.urls import hide_userinfo

    rows: list[Setting] = []
    for var in _VARS:
        raw = _raw(var.name, env)
        default = "unset" if var.default is None else str(var.default)
        if raw is None:
            rows.append(Setting(var.name, default, default, "default"))
            continue
        if var.secret:
            rows.append(Setting(var.name, "(set)", default, "environment"))
            continue
        try:
            value = value_of(var, env)
        except ConfigError as exc:
            shown = f"invalid: {exc}"
        else:
            shown = ",".join(value) if isinstance(value, tuple) else str(value)
        rows.append(Setting(var.name, hide_userinfo(shown), default, "environment"))
    return rows


def text_table(env: Mapping[str, str] | None = None) -> str:
    """``bir config``'s table for a terminal: name, value in effect, default, where from."""
    rows = [("variable", "value", "default", "from")]
    rows += [(s.name, s.value, s.default, s.source) for s in settings(env)]
    widths = [min(max(len(row[i]) for row in rows), 40) for i in range(3)]
    lines = []
    for row in rows:
        cells = [row[i][: widths[i]].ljust(widths[i]) for i in range(3)]
        lines.append("  ".join([*cells, row[3]]).rstrip())
    return "\n".join(lines)


def markdown_table() -> str:
    """The README's table of variables."""
    rows = ["| variable | default | ceiling | what it does |", "|---|---|---|---|"]
    for var in _VARS:
        default = "unset" if var.default is None else f"`{var.default}`"
        ceiling = "" if var.ceiling is None else f"{var.ceiling:,}"
        rows.append(f"| `{var.name}` | {default} | {ceiling} | {var.doc} |")
    return "\n".join(rows)
