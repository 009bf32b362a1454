"""The pin guard: the same tool is not the same call (spec §7, §13.2 mitigation 5).

A pin swaps the model's arguments for the step's and answers ``allow``, so it is kept only for a call
that plausibly *is* the step. A declined call runs exactly as the model wrote it and the plan stays
armed; the verdict's reason goes into the ``replay.pin_declined`` log line.

- ``Bash`` / ``PowerShell``: the same commands, chained the same way, each with the same head
  (:mod:`bir.core.shell_shape`), and nothing the step writes or executes beyond them (a redirection,
  ``curl -o``, ``find -exec``: :mod:`bir.core.shell_effects`) that the call does not do too, at the same
  place; a step with a command substitution pins only to an exact copy.
- Tools that write a file: the same file. Read-only file tools may be steered to the step's path.
- MCP tools whose input is run: every statement the step runs supplied with the same verb, or no
  arguments at all; a call that runs something where the step runs nothing is not the step.
- Everything else: at least one argument in common, and no argument naming where the call acts (a
  path, a URL, a repository, a host...) pointing somewhere else. A call with no arguments is pinned.

Run tools get the location check as well: a query against another database is not the step.
"""

from __future__ import annotations

import ntpath
import posixpath
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from bir.core.shell_effects import Effect
from bir.core.shell_shape import Shape, ShellParseError, command_profile, has_substitution, render
from bir.core.sql_verbs import statement_verbs
from bir.core.tool_kinds import (
    SHELL_TOOLS,
    input_is_run,
    name_words,
    names_query_language,
    reads_files,
    runs_powershell,
    runs_shell,
    writes_file,
)
from bir.core.truncate import cut

# Longer inputs are not parsed: they pin only to an exact copy.
MAX_COMPARED_CHARS: Final = 200_000
_SHOWN_CHARS: Final = 80

_LOCATION_WORDS: Final = frozenset(
    {
        "url", "urls", "uri", "uris", "href", "path", "paths", "file", "files", "filepath", "filename", "dir",
        "dirs", "directory", "folder", "cwd", "workdir", "repo", "repository", "owner", "branch", "host",
        "hostname", "server", "endpoint", "domain", "bucket", "database", "db", "project", "namespace", "cluster",
    }
)  # fmt: skip
_STATEMENT_WORDS: Final = frozenset(
    {"sql", "query", "queries", "statement", "statements", "command", "commands", "cmd", "script", "code", "q"}
)
_SHELL_KEY_WORDS: Final = frozenset({"command", "commands", "cmd", "script"})
_FILE_KEYS: Final = ("file_path", "notebook_path", "path")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_WINDOWS_PATH = re.compile(r"[A-Za-z]:[\\/]|\\\\")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


@dataclass(frozen=True)
class PinVerdict:
    """Whether a pin may replace the model's arguments with the step's, and why (one short sentence)."""

    ok: bool
    reason: str


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return cut(" ".join(text.split()), _SHOWN_CHARS)


def pin_compatible(
    tool_name: str, model_args: Mapping[str, object] | None, step_args: Mapping[str, object]
) -> PinVerdict:
    """Judge whether the model's call of ``tool_name`` plausibly is the step, so that pinning the
    step's arguments onto it is safe. Pure; never raises on odd arguments (they decline).
    """
    model: Mapping[str, object] = model_args or {}
    if tool_name in SHELL_TOOLS:
        return _shell_pin(model, step_args, powershell=tool_name == "PowerShell")
    if writes_file(tool_name):
        return _file_pin(model, step_args)
    if reads_files(tool_name):
        return PinVerdict(True, "a read-only file tool may be steered to the step's path")
    if input_is_run(tool_name):
        return _run_pin(tool_name, model, step_args)
    return _general_pin(model, step_args)


# --- shell commands -------------------------------------------------------------------------------


def _shell_pin(model: Mapping[str, object], step: Mapping[str, object], *, powershell: bool) -> PinVerdict:
    step_command = step.get("command")
    if not isinstance(step_command, str) or not step_command.strip():
        return PinVerdict(False, "the step has no command")
    model_command = model.get("command")
    if not isinstance(model_command, str) or not model_command.strip():
        return PinVerdict(False, "the call gives no command")
    return compare_commands(model_command, step_command, powershell=powershell)


def compare_commands(model_command: str, step_command: str, *, powershell: bool = False) -> PinVerdict:
    """Whether a command line is the step's: the same commands, chained the same way, same heads, and the
    step writing or executing nowhere the call does not (its effects are among the call's)."""
    if model_command.strip() == step_command.strip():
        return PinVerdict(True, "the same command as the step")
    if has_substitution(step_command):
        return PinVerdict(False, "the step's command has a command substitution; only an exact copy pins")
    if max(len(model_command), len(step_command)) > MAX_COMPARED_CHARS:
        return PinVerdict(False, "the command is too long to compare; only an exact copy pins")
    try:
        step_profile = command_profile(step_command, powershell=powershell)
    except ShellParseError as exc:
        return PinVerdict(False, f"the step's command cannot be read ({exc}); only an exact copy pins")
    try:
        model_profile = command_profile(model_command, powershell=powershell)
    except ShellParseError as exc:
        return PinVerdict(False, f"the command cannot be read ({exc})")
    if not step_profile.shape:
        return PinVerdict(False, "the step's command runs nothing; only an exact copy pins")
    if model_profile.shape != step_profile.shape:
        return PinVerdict(False, _shape_difference(model_profile.shape, step_profile.shape))
    extra = extra_effects(step_profile.effects, model_profile.effects)
    if extra:
        return PinVerdict(False, f"the step's command does `{_shown(extra[0].shown())}`, the call does not")
    return PinVerdict(True, "the same commands as the step, chained the same way")


def extra_effects(effects: tuple[Effect, ...], allowed: tuple[Effect, ...]) -> list[Effect]:
    """The effects of ``effects`` that ``allowed`` does not have (counted: two writes need two)."""
    left = Counter(allowed)
    extra: list[Effect] = []
    for effect in effects:
        if left[effect] > 0:
            left[effect] -= 1
        else:
            extra.append(effect)
    return extra


def _shape_difference(model: Shape, step: Shape) -> str:
    model_heads = [item for item in model if isinstance(item, tuple)]
    step_heads = [item for item in step if isinstance(item, tuple)]
    if len(model_heads) != len(step_heads):
        return (
            f"the call runs {len(model_heads)} command(s), the step {len(step_heads)}: "
            f"`{_shown(render(model))}` vs `{_shown(render(step))}`"
        )
    for n, (mine, theirs) in enumerate(zip(model_heads, step_heads, strict=True)):
        if mine != theirs:
            which = "the call runs" if len(step_heads) == 1 else f"command {n + 1} runs"
            return f"{which} `{_shown(' '.join(mine))}`, the step runs `{_shown(' '.join(theirs))}`"
    return (
        f"the commands are chained differently from the step's: `{_shown(render(model))}` vs `{_shown(render(step))}`"
    )


# --- files ----------------------------------------------------------------------------------------


def _file_of(args: Mapping[str, object]) -> str | None:
    for key in _FILE_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _file_pin(model: Mapping[str, object], step: Mapping[str, object]) -> PinVerdict:
    step_file = _file_of(step)
    if step_file is None:
        return PinVerdict(False, "the step names no file")
    model_file = _file_of(model)
    if model_file is None:
        return PinVerdict(False, "the call names no file")
    if _normal_path(model_file) == _normal_path(step_file):
        return PinVerdict(True, "the same file as the step")
    return PinVerdict(False, f"the call writes `{_shown(model_file)}`, the step writes `{_shown(step_file)}`")


def _normal_path(path: str) -> str:
    path = path.strip()
    if _WINDOWS_PATH.match(path):
        return ntpath.normpath(path).replace("\\", "/").casefold()
    return posixpath.normpath(path)


# --- where a call acts ----------------------------------------------------------------------------


def _is_location_key(key: str) -> bool:
    return any(word in _LOCATION_WORDS for word in name_words(key))


def _normal_url(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url.strip()
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
    path = parts.path.rstrip("/") or "/"
    return f"{scheme}://{netloc}{path}?{parts.query}#{parts.fragment}"


def _place(value: object, depth: int = 0) -> object:
    """A comparable form of a location value: URLs and paths normalised, containers element-wise."""
    if isinstance(value, str):
        text = value.strip()
        if _URL.match(text):
            return _normal_url(text)
        if "/" in text or "\\" in text:
            return _normal_path(text)
        return text
    if depth > 8:
        return repr(value)
    if isinstance(value, list | tuple):
        return tuple(_place(v, depth + 1) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), repr(_place(v, depth + 1))) for k, v in value.items()))
    return value


def _empty(value: object) -> bool:
    return value is None or value in ("", [], {})


def _location_conflict(model: Mapping[str, object], step: Mapping[str, object]) -> str | None:
    for key in sorted(model, key=str):
        value = model[key]
        named = _is_location_key(str(key))
        url_valued = isinstance(value, str) and _URL.match(value.strip()) is not None
        if not (named or url_valued):
            continue
        if key not in step:
            if named and not _empty(value):
                return f"`{_shown(key)}` names a place the step does not ({_shown(value)})"
            continue
        if _place(value) != _place(step[key]):
            return f"`{_shown(key)}` points somewhere else: `{_shown(value)}`, the step's is `{_shown(step[key])}`"
    return None


def _general_pin(model: Mapping[str, object], step: Mapping[str, object]) -> PinVerdict:
    if not model:
        return PinVerdict(True, "a call with no arguments takes the step's")
    conflict = _location_conflict(model, step)
    if conflict is not None:
        return PinVerdict(False, conflict)
    common = sorted((key for key in model if key in step), key=str)
    if not common:
        return PinVerdict(False, "the call has no argument in common with the step")
    return PinVerdict(True, f"the call shares `{_shown(common[0])}` with the step")


# --- tools that run their input -------------------------------------------------------------------


def statements(value: object) -> list[str]:
    """The non-empty statements an argument holds (a text, or a list of texts)."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str) and v.strip()]
    return []


def statement_keys(args: Mapping[str, object]) -> set[str]:
    return {key for key in args if any(word in _STATEMENT_WORDS for word in name_words(str(key)))}


def _run_pin(tool_name: str, model: Mapping[str, object], step: Mapping[str, object]) -> PinVerdict:
    if not model:
        return PinVerdict(True, "a call with no arguments takes the step's")
    conflict = _location_conflict(model, step)
    if conflict is not None:
        return PinVerdict(False, conflict)
    keys = statement_keys(step) | statement_keys(model)
    if not keys:
        # No argument is named for what runs: every text argument of either side may be it.
        keys = {
            key
            for args in (step, model)
            for key, value in args.items()
            if not _is_location_key(str(key)) and statements(value)
        }
    shell_tool = runs_shell(tool_name)
    query_tool = names_query_language(tool_name)
    for key in sorted(keys, key=str):
        step_runs = statements(step.get(key))
        model_runs = statements(model.get(key))
        if not step_runs:
            if model_runs:
                return PinVerdict(False, f"the call runs something in `{_shown(key)}`, where the step runs nothing")
            continue
        if not model_runs:
            return PinVerdict(False, f"the call does not supply the step's `{_shown(key)}`")
        as_shell = shell_tool or (not query_tool and any(w in _SHELL_KEY_WORDS for w in name_words(str(key))))
        verdict = (
            _same_commands(key, model_runs, step_runs, powershell=runs_powershell(tool_name))
            if as_shell
            else _same_verbs(key, model_runs, step_runs)
        )
        if verdict is not None:
            return verdict
    return PinVerdict(True, "every statement the step runs is supplied with the same verb")


def _same_commands(key: str, model_runs: list[str], step_runs: list[str], *, powershell: bool) -> PinVerdict | None:
    if len(model_runs) != len(step_runs):
        return PinVerdict(False, f"`{_shown(key)}` runs {len(model_runs)} command(s), the step {len(step_runs)}")
    for mine, theirs in zip(model_runs, step_runs, strict=True):
        verdict = compare_commands(mine, theirs, powershell=powershell)
        if not verdict.ok:
            return PinVerdict(False, f"`{_shown(key)}`: {verdict.reason}")
    return None


def _same_verbs(key: str, model_runs: list[str], step_runs: list[str]) -> PinVerdict | None:
    if model_runs == step_runs:
        return None
    if max(sum(map(len, model_runs)), sum(map(len, step_runs))) > MAX_COMPARED_CHARS:
        return PinVerdict(False, f"`{_shown(key)}` is too long to compare; only an exact copy pins")
    model_verbs = [verb for text in model_runs for verb in statement_verbs(text)]
    step_verbs = [verb for text in step_runs for verb in statement_verbs(text)]
    if model_verbs == step_verbs:
        return None
    return PinVerdict(
        False,
        f"`{_shown(key)}` runs {_shown(' + '.join(model_verbs) or 'nothing')}, "
        f"the step runs {_shown(' + '.join(step_verbs) or 'nothing')}",
    )
