"""Every ``BIR_*`` variable bir reads: its default, its ceiling and one line of documentation.

Nothing else in bir reads ``os.environ`` for a ``BIR_*`` name, nor looks a variable up by its name: each
process reads them all once (``load``) into a typed, frozen ``Settings`` its composition root passes down
(``bir-hook``, which reads only ``home`` and ``off``, has a function for each). A number past its ceiling
is brought under it and logged once as ``replay.budget_clamped``; a value that is not a number raises
``ConfigError`` naming the variable (the CLI turns it into a one-line error, never a traceback).
The README's table is generated from ``VARIABLES`` (``bir config --markdown``) and a test keeps the two
in step.
"""

from __future__ import annotations

import _thread
import os
from collections import namedtuple
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

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


def field_name(var: Variable) -> str:
    """The ``Settings`` field of ``var``: its name without ``BIR_``, in lower case."""
    return var.name.removeprefix("BIR_").lower()


if TYPE_CHECKING:

    class _Fields(NamedTuple):
        # One per row of ``_VARS``, in its order, typed by its kind and default (a test holds them to it).
        home: Path
        logic_timeout_ms: int
        logic_memory_mb: int
        logic_workers: int
        logic_max_jobs: int
        logic_budget_margin: float
        logic_walls: bool
        logic_queue: int
        logic_engine: Literal["v8", "quickjs"]
        logic_engine_surface: Literal["auto", "public"]
        replay: bool | None
        off: bool
        min_steer_similarity: float
        replay_recorded_outputs: bool
        replay_allow_servers: tuple[str, ...] | None
        correlation_decision: Literal["none", "allow", "ask"]
        step_timeout_ms: int
        replay_plan_budget_ms: int
        replay_budget_ms: int | None
        derive_budget_ms: int
        hook_derive_budget_ms: int
        pretool_replay_budget_ms: int
        match_budget_ms: int
        match_slow_ms: int
        service_timeout_ms: int
        scenario_run_timeout_ms: int
        scenario_debug: bool
        scenario_tools: Literal["read"] | None
        scenario_max_output_chars: int
        read_timeout_ms: int
        auth_url: str | None
        service: Literal["local", "remote"] | None
        local_store_mb: int
        local_match_scope: Literal["project", "user"]
        local_embed_min_similarity: float
        local_min_runs: int
        local_model_max_usd: float
        token: str | None
        derive_api_key: str | None
        use_anthropic_api_key: bool
        derive_model: str
        control_idle_ms: int
        server_name: str | None

else:
    # At run time the fields come from the table itself: a typing.NamedTuple would turn each annotation
    # into a compiled ForwardRef on import, about a millisecond of every bir-hook call (`bir bench pin`).
    _Fields = namedtuple("_Fields", [field_name(var) for var in _VARS])


class Settings(_Fields):
    """Every ``BIR_*`` variable, read once (``load``) and passed down: one field per row of ``_VARS``, in
    its order, named as the variable without ``BIR_`` in lower case and typed by its kind and default (a
    variable with a default is never None). A misspelt field is an error for mypy, not a ``KeyError``
    at the first use. A tuple, not a dataclass: ``bir-hook`` imports this module at every tool call.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        # A secret (or a URL's userinfo) never reaches a log line or a traceback through a repr.
        from bir.core.urls import hide_userinfo

        shown = (
            f"{field}={'(set)' if var.secret and value is not None else hide_userinfo(repr(value))}"
            for field, var, value in zip(self._fields, _VARS, self, strict=True)
        )
        return f"Settings({', '.join(shown)})"


VARIABLES: Mapping[str, Variable] = {v.name: v for v in _VARS}
SECRETS: frozenset[str] = frozenset(v.name for v in _VARS if v.secret)
register_secret_variables(SECRETS)

_clamped_lock = _thread.allocate_lock()
_clamped_logged: set[tuple[str, str]] = set()


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


def _int(var: Variable, env: Mapping[str, str] | None) -> int | None:
    raw = _raw(var.name, env)
    if raw is None:
        return None if var.default is None else int(var.default)
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ConfigError(f"{var.name} must be a whole number, got {raw[:80]!r}") from None
    return int(_bound(var, value))


def _float(var: Variable, env: Mapping[str, str] | None) -> float | None:
    raw = _raw(var.name, env)
    if raw is None:
        return None if var.default is None else float(var.default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{var.name} must be a number, got {raw[:80]!r}") from None
    return float(_bound(var, value))


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag(var: Variable, env: Mapping[str, str] | None) -> bool | None:
    raw = _raw(var.name, env)
    if raw is None:
        return None if var.default is None else bool(var.default)
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"{var.name} must be 1 or 0, got {raw[:80]!r}")


def _str(var: Variable, env: Mapping[str, str] | None) -> str | None:
    raw = _raw(var.name, env)
    if raw is None:
        return None if var.default is None else str(var.default)
    if var.choices and raw.lower() not in var.choices:
        raise ConfigError(f"{var.name} must be one of {', '.join(var.choices)}, got {raw[:80]!r}")
    return raw.lower() if var.choices else raw


def _list(var: Variable, env: Mapping[str, str] | None) -> tuple[str, ...] | None:
    raw = _raw(var.name, env)
    if raw is None:
        return None
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _path(var: Variable, env: Mapping[str, str] | None) -> Path:
    raw = _raw(var.name, env)
    return Path(raw if raw is not None else str(var.default)).expanduser()


_READERS: Final[Mapping[Kind, Callable[[Variable, Mapping[str, str] | None], object]]] = {
    "int": _int,
    "float": _float,
    "flag": _flag,
    "str": _str,
    "choice": _str,
    "list": _list,
    "path": _path,
}
_HOME: Final = _VARS[0]
_OFF: Final = next(v for v in _VARS if v.name == "BIR_OFF")


def home(env: Mapping[str, str] | None = None) -> Path:
    """``BIR_HOME``, or ``~/.baseinstrunner``, alone: ``bir-hook``'s path reads no other variable but ``off``."""
    return _path(_HOME, env)


def off(env: Mapping[str, str] | None = None) -> bool:
    """``BIR_OFF`` alone, for ``bir-hook`` (which reads nothing else but ``home``).

    Raises:
        ConfigError: ``BIR_OFF`` holds something other than a flag.
    """
    return bool(_flag(_OFF, env))


def _value_of(var: Variable, env: Mapping[str, str] | None) -> object:
    return _READERS[var.kind](var, env)


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Every ``BIR_*`` variable read once (``env``, else this process's environment), for a composition
    root to pass down; a value past its ceiling is brought under it (logged once).

    Raises:
        ConfigError: the first variable (in ``VARIABLES`` order) holding a value bir cannot use.
    """
    return Settings._make([_value_of(var, env) for var in _VARS])


def load_lenient(env: Mapping[str, str] | None = None) -> tuple[Settings, list[tuple[str, ConfigError]]]:
    """``load``, but a variable bir cannot use reads as unset (its default) and is answered with its error:
    what ``bir doctor`` judges the rest by, and lists."""
    values: list[object] = []
    bad: list[tuple[str, ConfigError]] = []
    for var in _VARS:
        try:
            values.append(_value_of(var, env))
        except ConfigError as exc:
            bad.append((var.name, exc))
            values.append(_value_of(var, {}))
    return Settings._make(values), bad


def invalid_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, ConfigError]]:
    """Every ``BIR_*`` variable holding a value bir cannot use, with its error (``bir doctor`` lists them)."""
    return load_lenient(env)[1]


def bounded(settings: Settings) -> Settings:
    """``settings`` with every number brought under its variable's ceiling, as ``load`` brings one read
    from the environment: for values given programmatically (a constructor's arguments, ``_replace``).

    Raises:
        ConfigError: a number is below its variable's floor.
    """
    return Settings._make(_bounded_value(var, value) for var, value in zip(_VARS, settings, strict=True))


def _bounded_value(var: Variable, value: object) -> object:
    if var.kind not in ("int", "float") or not isinstance(value, int | float) or isinstance(value, bool):
        return value
    within = _bound(var, value)
    return int(within) if var.kind == "int" else float(within)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` minus bir's own secrets (``SECRETS``): what a process bir starts is given.

    ``ANTHROPIC_API_KEY`` is kept: a host merges a server entry's own ``env`` into the one it passes,
    so a proxy cannot tell a key the entry set for its server from one it merely inherited.
    """
    return {name: value for name, value in env.items() if name not in SECRETS}


class Setting(NamedTuple):
    """One row of ``bir config``: the value in effect (``(set)`` for a secret), its default, where it comes from."""

    name: str
    value: str
    default: str
    source: Literal["environment", "default"]


def rows(env: Mapping[str, str] | None = None) -> list[Setting]:
    """Every variable as ``bir config`` shows it; a value bir cannot use is shown with its error.

    Secrets are never shown, only whether they are set, and a URL never with its userinfo.
    """
    from bir.core.urls import hide_userinfo

    found: list[Setting] = []
    for var in _VARS:
        raw = _raw(var.name, env)
        default = "unset" if var.default is None else str(var.default)
        if raw is None:
            found.append(Setting(var.name, default, default, "default"))
            continue
        if var.secret:
            found.append(Setting(var.name, "(set)", default, "environment"))
            continue
        try:
            value = _value_of(var, env)
        except ConfigError as exc:
            shown = f"invalid: {exc}"
        else:
            shown = ",".join(value) if isinstance(value, tuple) else str(value)
        found.append(Setting(var.name, hide_userinfo(shown), default, "environment"))
    return found


def text_table(env: Mapping[str, str] | None = None) -> str:
    """``bir config``'s table for a terminal: name, value in effect, default, where from."""
    table = [("variable", "value", "default", "from")]
    table += [(s.name, s.value, s.default, s.source) for s in rows(env)]
    widths = [min(max(len(row[i]) for row in table), 40) for i in range(3)]
    lines = []
    for row in table:
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
