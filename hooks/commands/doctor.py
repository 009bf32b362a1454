"""``bir doctor``: what is wrong with bir in a project, and the command that fixes each thing (spec §13.2
mitigation 3, §16.5).

The replay block comes first and loudly: ``replay: on`` and the effective allowlist, then
``BIR_MIN_STEER_SIMILARITY`` and who derives parameters. Then the hooks as installed against what
``bir install`` writes (``api.HOOK_ROUTES``: timeouts, never ``async``), each wrapped server with its
proxy, the ``bir`` server, the evaluator, the service. ``gather`` reads; ``diagnose`` is pure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bir.core import config, installed
from bir.core.exits import EXIT_FAILED, EXIT_OK
from bir.core.home_files import home_problems
from bir.evaluator import walls
from bir.hooks import api
from bir.hooks.commands.probes import Serving, serving
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.result import CHECK_EXIT_CODES, Subparsers, add_command, json_flag, project_flag, write_json
from bir.hooks.commands.server_modes import KnownScenario, ServerMode, known_scenarios, modes_of
from bir.hooks.commands.server_modes import describe as describe_modes
from bir.hooks.commands.status import StatusFacts
from bir.hooks.commands.status import gather as gather_status
from bir.hooks.commands.term import ago, paint, shown, wants_colour
from bir.hooks.wiring import (
    HookStyle,
    InstallError,
    claude_config_file,
    is_bir_hook,
    is_mcp_hook,
    read_json_file,
    stored_hook_style,
)

Level = Literal["broken", "warning", "ok"]
Deriver = Literal["this machine", "the service", "nobody"]
# The module each engine's workers import (bir.evaluator.engine_v8 / engine_quickjs).
ENGINE_MODULES: Mapping[str, str] = {"v8": "py_mini_racer", "quickjs": "dukpy"}


@dataclass(frozen=True)
class HookFact:
    """bir's hook for one event as found in ``.claude/settings.local.json``."""

    event: str
    found: int
    timeout: object = None
    is_async: bool = False
    command: str = ""
    runnable: bool = False
    # "mcp_tool" for the tool events as ``bir install`` writes them by default; its input is as install writes it.
    kind: str = "command"
    input_ok: bool = True


@dataclass(frozen=True)
class EvaluatorFacts:
    engine: str
    engine_available: bool
    workers: str
    timeout_ms: str
    timeout_from: str
    # The kernel's walls a worker puts up under its isolate (``bir.evaluator.walls.describe``).
    walls: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DoctorFacts:
    """Everything ``bir doctor`` judges, gathered once."""

    status: StatusFacts
    settings_path: str
    settings_error: str | None
    hooks: tuple[HookFact, ...]
    local_servers: Mapping[str, str]  # name → "proxy" | "bir" | "other"
    min_steer_similarity: float
    derive_key: bool
    anthropic_key_ignored: bool
    evaluator: EvaluatorFacts
    # ``BIR_*`` variables bir cannot use (name, why): every other command refuses to run while one is set.
    config_errors: tuple[tuple[str, str], ...] = ()
    serving: Serving = "none"
    # How install wrote the tool events' hooks; None: an install older than the choice (it wrote commands).
    hook_style: HookStyle | None = "mcp_tool"
    # The scenarios bir knows (read only when a server is unwrapped): each unwrapped server's finding
    # names those that call it and the mode each gets.
    scenarios: tuple[KnownScenario, ...] = ()
    # What makes BIR_HOME or a folder in it one bir refuses (``core.home_files.home_problems``).
    home_problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One line of the doctor's report: its topic, how bad, what it saw and the command that fixes it."""

    topic: str
    level: Level
    text: str
    fix: str | None = None
    # An unwrapped server's finding: the known scenarios that call it, with their modes.
    scenarios: tuple[ServerMode, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.topic, "level": self.level, "text": self.text, "fix": self.fix}
        if self.topic == "servers" and self.scenarios:
            out["scenarios"] = [m.to_json() for m in self.scenarios]
        return out


@dataclass(frozen=True)
class Diagnosis:
    replay_on: bool
    allow: tuple[str, ...] | None
    deriver: Deriver
    findings: list[Finding] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        return any(f.level == "broken" for f in self.findings)


# -- gathering ---------------------------------------------------------------------------------------


def _runnable(command: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return bool(words) and os.path.isfile(words[0]) and os.access(words[0], os.X_OK)


def read_hooks(settings: Mapping[str, Any]) -> tuple[HookFact, ...]:
    """bir's hook of each event in a settings document (``bir install``'s shape)."""
    hooks = settings.get("hooks")
    hooks = hooks if isinstance(hooks, dict) else {}
    facts: list[HookFact] = []
    for event in api.HOOK_ROUTES:
        groups = hooks.get(event)
        ours: list[dict[str, Any]] = []
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hook in inner if isinstance(inner, list) else []:
                if is_mcp_hook(hook):
                    if event in api.MCP_HOOK_EVENTS:
                        ours.append(hook)
                elif is_bir_hook(hook) and shlex.split(str(hook["command"]))[1] == event:
                    ours.append(hook)
        if not ours:
            facts.append(HookFact(event, 0))
            continue
        first = ours[0]
        if is_mcp_hook(first):
            timeout, is_async = first.get("timeout"), first.get("async") is True
            input_ok = first.get("input") == api.MCP_HOOK_INPUT
            facts.append(HookFact(event, len(ours), timeout, is_async, kind="mcp_tool", input_ok=input_ok))
            continue
        command = str(first.get("command", ""))
        facts.append(
            HookFact(event, len(ours), first.get("timeout"), first.get("async") is True, command, _runnable(command))
        )
    return tuple(facts)


def read_local_servers(config_doc: Mapping[str, Any], project: str) -> dict[str, str]:
    """The project's local-scope MCP servers in Claude Code's config: behind ``bir-proxy``, ``bir``'s own, or other."""
    projects = config_doc.get("projects")
    entry = projects.get(project) if isinstance(projects, dict) else None
    servers = entry.get("mcpServers") if isinstance(entry, dict) else None
    kinds: dict[str, str] = {}
    for name, server in (servers if isinstance(servers, dict) else {}).items():
        command = Path(str(server.get("command", ""))).name if isinstance(server, dict) else ""
        kinds[str(name)] = {"bir-proxy": "proxy", "bir-scenario": "bir"}.get(command, "other")
    return kinds


def _setting(name: str) -> config.Setting:
    return next(s for s in config.rows() if s.name == name)


@contextlib.contextmanager
def _read_as_unset(names: Sequence[str]) -> Iterator[None]:
    """``names`` out of this process's environment for the block: the rest of the report is judged as bir
    would run once the bad values are gone, instead of stopping at the first one."""
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


async def gather(project_dir: str | Path) -> DoctorFacts:
    """The facts of ``bir doctor`` for the project at ``project_dir``; a ``BIR_*`` value bir cannot use is
    a fact too (``config_errors``), and everything else is read as if it were unset."""
    settings, errors = config.load_lenient()
    bad = tuple((name, str(exc)) for name, exc in errors)
    # Out of the environment too, for what the checks start (a worker, a probe's process).
    with _read_as_unset([name for name, _ in bad]):
        facts = await _gather(project_dir, settings)
    return dataclasses.replace(facts, config_errors=bad)


async def _gather(project_dir: str | Path, settings: config.Settings) -> DoctorFacts:
    status = await gather_status(project_dir, settings)
    project = Path(status.project)
    settings_path = project / ".claude" / "settings.local.json"
    settings_error = None
    try:
        _, local_settings = read_json_file(settings_path)
    except InstallError as exc:
        local_settings, settings_error = {}, str(exc)
    try:
        _, config_doc = read_json_file(claude_config_file())
    except InstallError:
        config_doc = {}
    stored = installed.project(project, settings.home)
    record = stored.install if stored is not None else {}
    style: HookStyle | None = stored_hook_style(record) if "hookStyle" in record or record.get("mcpHooks") else None
    engine = settings.logic_engine
    timeout = _setting("BIR_LOGIC_TIMEOUT_MS")
    derive_key = bool(settings.derive_api_key)
    anthropic = bool(os.environ.get("ANTHROPIC_API_KEY", "").strip())
    use_anthropic = settings.use_anthropic_api_key
    served = serving(status.sign_in, settings)
    return DoctorFacts(
        status=status,
        settings_path=str(settings_path),
        settings_error=settings_error,
        hooks=read_hooks(local_settings),
        local_servers=read_local_servers(config_doc, status.project),
        min_steer_similarity=settings.min_steer_similarity,
        hook_style=style,
        derive_key=derive_key or (anthropic and use_anthropic),
        anthropic_key_ignored=anthropic and not use_anthropic and not derive_key,
        evaluator=EvaluatorFacts(
            engine=engine,
            engine_available=importlib.util.find_spec(ENGINE_MODULES.get(engine, engine)) is not None,
            workers=_setting("BIR_LOGIC_WORKERS").value,
            timeout_ms=timeout.value,
            timeout_from=timeout.source,
            walls=walls.describe(enabled=settings.logic_walls),
        ),
        serving=served,
        scenarios=known_scenarios(project, local=served == "local") if status.unwrapped else (),
        home_problems=tuple(home_problems(settings.home)),
    )


# -- judging ---------------------------------------------------------------------------------------


def who_derives(facts: DoctorFacts) -> Deriver:
    """This machine (a derivation key), the service (the local one where it serves, else signed in with a
    token not refused), or nobody."""
    if facts.derive_key:
        return "this machine"
    if facts.serving == "local":
        # The local service derives by slot alignment, on this machine, for nothing (unless its store is unusable).
        local = facts.status.local
        return "the service" if local is None or not local.get("error") else "nobody"
    service = facts.status.service
    if service.url is not None and facts.status.sign_in.token is not None and service.verdict != "refused":
        return "the service"
    return "nobody"


def _replay_findings(facts: DoctorFacts, deriver: Deriver) -> list[Finding]:
    view = facts.status.replay
    out: list[Finding] = []
    if view.replay and view.allow is None:
        out.append(
            Finding(
                "replay",
                "warning",
                "replay is on with no allowlist: bir may call every wrapped server by itself, without a prompt",
                "bir replay allow <server,server>"
                + (f"  (wrapped here: {','.join(view.wrapped)})" if view.wrapped else ""),
            )
        )
    if view.replay and not view.bir_server:
        out.append(
            Finding(
                "replay",
                "warning",
                "the `bir` MCP server is not registered: direct plans are never offered",
                "bir install --replay",
            )
        )
    for server in facts.status.unwrapped:
        # §4: a scenario whose steps are all wrapped MCP tools runs direct; one step of an unwrapped server
        # makes the whole scenario steer (the model makes each call, bir pins it), and divergence cannot run it.
        modes = modes_of(server.name, facts.scenarios, set(view.wrapped))
        out.append(
            Finding(
                "servers",
                "warning",
                f"{server.name}: not wrapped ({server.why}): every scenario that calls its tools runs in steer mode"
                f" instead of direct, and no step of it runs by itself. {describe_modes(server.name, modes)}",
                server.fix,
                tuple(modes),
            )
        )
    if view.replay and deriver == "nobody":
        out.append(
            Finding(
                "derive",
                "broken",
                "nobody derives parameters (no BIR_DERIVE_API_KEY, not signed in): a scenario with a target never runs",
                "bir login  (or set BIR_DERIVE_API_KEY)",
            )
        )
    if facts.anthropic_key_ignored:
        out.append(
            Finding(
                "derive",
                "ok",
                "ANTHROPIC_API_KEY is set but not used for derivation (BIR_USE_ANTHROPIC_API_KEY=1 would allow it)",
            )
        )
    return out


def _hook_findings(facts: DoctorFacts) -> list[Finding]:
    if facts.settings_error is not None:
        return [Finding("hooks", "broken", facts.settings_error, f"fix {facts.settings_path}, then: bir install")]
    out: list[Finding] = []
    for hook in facts.hooks:
        expected = api.HOOK_ROUTES[hook.event].timeout_s
        if hook.found == 0:
            out.append(Finding("hooks", "broken", f"{hook.event}: bir's hook is missing", "bir install"))
            continue
        wrong = []
        if hook.timeout != expected:
            wrong.append(f"timeout {hook.timeout!r}, expected {expected}")
        if hook.is_async:
            wrong.append("async (a step's PostToolUse must finish before the next PreToolUse)")
        if hook.kind == "mcp_tool":
            if facts.local_servers.get(api.BIR_SERVER) != "bir":
                wrong.append("an mcp_tool hook on the `bir` MCP server, which is not registered")
            if not hook.input_ok:
                wrong.append("its input is not the one install writes")
        elif not hook.runnable:
            wrong.append(f"{hook.command.split(' ')[0]} is not an executable file")
        if hook.found > 1:
            wrong.append(f"{hook.found} copies")
        if wrong:
            out.append(Finding("hooks", "broken", f"{hook.event}: " + "; ".join(wrong), "bir install"))
    if not out:
        timeouts = ", ".join(f"{h.event} {h.timeout}s" for h in facts.hooks)
        mcp = [h.event for h in facts.hooks if h.kind == "mcp_tool"]
        through = f"; {', '.join(mcp)} as mcp_tool hooks on the `bir` server" if mcp else ""
        out.append(
            Finding("hooks", "ok", f"all {len(facts.hooks)} hooks as expected, none async ({timeouts}){through}")
        )
        tool_commands = [h.event for h in facts.hooks if h.event in api.MCP_HOOK_EVENTS and h.kind == "command"]
        if tool_commands and facts.hook_style is None:
            out.append(
                Finding(
                    "hooks",
                    "warning",
                    f"{', '.join(tool_commands)} run bir-hook, a process per tool call (an older install):"
                    " installing again makes them mcp_tool hooks on the `bir` server, at about the cost of no hooks",
                    "bir install",
                )
            )
    return out


def _server_findings(facts: DoctorFacts) -> list[Finding]:
    status = facts.status
    health = status.control.health
    out: list[Finding] = []
    wrapped = sorted({n for n, kind in facts.local_servers.items() if kind == "proxy"} | set(status.replay.wrapped))
    if status.control.discovery is None:
        text = "the control server is not running" + (
            ": marked down, nothing revives it" if status.down else " (the next hook starts it)"
        )
        out.append(Finding("control", "warning" if status.down else "ok", text, "bir up" if status.down else None))
    elif health is None:
        out.append(
            Finding(
                "control", "broken", f"the control server does not answer: {status.control.error}", "bir down && bir up"
            )
        )
    else:
        found = status.control.discovery
        up = f"up for {ago(health.uptime_ms)} (pid {found.pid}, {found.url})"
        out.append(Finding("control", "ok", f"the control server is {up}"))
    for name in wrapped:
        if name not in facts.local_servers:
            out.append(
                Finding(
                    "proxies", "broken", f"{name}: install wrapped it, but its local-scope entry is gone", "bir install"
                )
            )
        elif health is None:
            continue
        elif name in health.served:
            out.append(Finding("proxies", "ok", f"{name}: proxy alive"))
        elif name in health.left:
            out.append(
                Finding(
                    "proxies", "ok", f"{name}: its session closed, and its proxy with it (one starts with the next)"
                )
            )
        elif name in health.wrapped:
            out.append(
                Finding(
                    "proxies",
                    "warning",
                    f"{name}: its proxy stopped asking for work without saying goodbye (it died, or hangs)",
                    f"if a Claude Code session is open in this project, restart it; the server's log: {status.log}",
                )
            )
        else:
            out.append(Finding("proxies", "ok", f"{name}: no proxy yet (one starts with a Claude Code session)"))
    if status.replay.bir_server and facts.local_servers.get(api.BIR_SERVER) != "bir":
        out.append(
            Finding(
                "bir server",
                "broken",
                "install registered the `bir` server, but its entry is gone (it carries the tool events' hooks)",
                "bir install",
            )
        )
    if health is not None and status.replay.replay:
        hello = health.last_hello
        if hello is None:
            out.append(Finding("bir server", "ok", "no hello from a `bir` server yet (one starts with a session)"))
        elif hello.off:
            out.append(
                Finding("bir server", "warning", "the `bir` server says bir is off: it lists no tools", "bir on")
            )
    return out


def _local_findings(local: Mapping[str, Any]) -> list[Finding]:
    if local.get("error"):
        return [
            Finding("service", "broken", f"the local store cannot be used: {local['error']}", "move the file aside")
        ]
    used, limit = int(local.get("bytes", 0)), int(local["limitBytes"])
    said = (
        f"the local service, on this machine: {local.get('runs', 0)} runs, {local.get('ready', 0)} ready scenarios, "
        f"{used / 2**20:.1f} of {limit / 2**20:.0f} MB in {local['path']}"
    )
    if used > 0.9 * limit:
        return [Finding("service", "warning", said + " (the oldest runs are being pruned)", "raise BIR_LOCAL_STORE_MB")]
    return [Finding("service", "ok", said)]


def _service_findings(facts: DoctorFacts) -> list[Finding]:
    if facts.status.local is not None:
        return _local_findings(facts.status.local)
    check = facts.status.service
    if check.verdict == "refused":
        return [Finding("service", "broken", f"{check.url} refused the token", "bir login")]
    if check.verdict == "unexpected":
        return [
            Finding(
                "service", "broken", f"{check.url} answered oddly: {check.detail}", "check BIR_AUTH_URL, then bir login"
            )
        ]
    if check.verdict == "unreachable":
        return [
            Finding(
                "service",
                "warning",
                f"{check.url} cannot be reached: {check.detail}",
                "check the network or BIR_AUTH_URL",
            )
        ]
    if check.verdict == "unconfigured":
        return [Finding("service", "warning", "signed out: nothing is matched or recorded", "bir login --url URL")]
    health = facts.status.control.health
    if health is not None and health.service == "cooling":
        return [Finding("service", "warning", "the control server is cooling down after a service failure", None)]
    return [Finding("service", "ok", f"{check.url} reachable, token accepted")]


def _evaluator_findings(facts: DoctorFacts) -> list[Finding]:
    ev = facts.evaluator
    text = f"engine {ev.engine}, {ev.workers} workers, BIR_LOGIC_TIMEOUT_MS={ev.timeout_ms} (from {ev.timeout_from})"
    if not ev.engine_available:
        module = ENGINE_MODULES.get(ev.engine, ev.engine)
        return [
            Finding(
                "evaluator",
                "broken",
                f"{text}: {module} is not installed",
                "pip install -e . (bir's own dependencies)",
            )
        ]
    # The limit is tuned from a real scenario's bodies, not guessed (issue 10): say where to measure it.
    found = [Finding("evaluator", "ok", f"{text}; to tune it: bir bench eval --scenario FILE|scn_…")]
    shown = "; ".join(f"{name} {state}" for name, state in ev.walls.items())
    if walls.all_up(dict(ev.walls)):
        found.append(Finding("evaluator", "ok", f"the kernel's walls under each worker: {shown}"))
    elif ev.walls:
        off = any(state.startswith("off") for state in ev.walls.values())
        fix = "unset BIR_LOGIC_WALLS" if off else "a kernel with Landlock (ABI 4+) and seccomp"
        found.append(
            Finding("evaluator", "warning", f"not all of the kernel's walls are up under the workers: {shown}", fix)
        )
    return found


def _config_findings(facts: DoctorFacts) -> list[Finding]:
    return [
        Finding(
            "config",
            "broken",
            f"{why}: every other bir command refuses to run until it is fixed (this report reads it as unset)",
            f"unset {name}  (or give it a usable value; `bir config` shows its default)",
        )
        for name, why in facts.config_errors
    ]


def _home_findings(facts: DoctorFacts) -> list[Finding]:
    # Every hook answers `{}` and every server refuses to start while its home is one bir cannot trust.
    out: list[Finding] = []
    for problem in facts.home_problems:
        said, _, fixed = problem.partition("; `")
        fix = fixed.split("`")[0] if fixed else "move it away; bir makes its own"
        out.append(Finding("home", "broken", said, fix))
    return out


def diagnose(facts: DoctorFacts) -> Diagnosis:
    """Every finding about ``facts``, the replay block first (after any unusable ``BIR_*`` value)."""
    status = facts.status
    deriver = who_derives(facts)
    findings: list[Finding] = _config_findings(facts) + _home_findings(facts)
    if status.off.off:
        by = "BIR_OFF=1" if status.off.env else status.off.path
        findings.append(Finding("switches", "warning", f"bir is OFF ({by}): nothing is matched or replayed", "bir on"))
    if not status.replay.installed:
        findings.append(
            Finding("install", "broken", f"bir is not installed in {status.project}", "bir install --replay")
        )
    else:
        findings += _replay_findings(facts, deriver)
        findings += _hook_findings(facts)
        findings += _server_findings(facts)
    findings += _service_findings(facts)
    findings += _evaluator_findings(facts)
    return Diagnosis(status.replay.replay, status.replay.allow, deriver, findings)


# -- rendering -------------------------------------------------------------------------------------


def render_json(facts: DoctorFacts, diagnosis: Diagnosis) -> dict[str, Any]:
    """``bir doctor --json``."""
    return {
        "project": facts.status.project,
        "replay": {
            "on": diagnosis.replay_on,
            "allow": None if diagnosis.allow is None else list(diagnosis.allow),
            "minSteerSimilarity": facts.min_steer_similarity,
            "derives": diagnosis.deriver,
        },
        "serving": facts.serving,
        "broken": diagnosis.broken,
        "findings": [f.to_json() for f in diagnosis.findings],
    }


_MARKS: Mapping[Level, tuple[str, Literal["red", "yellow", "green"]]] = {
    "broken": ("✗", "red"),
    "warning": ("!", "yellow"),
    "ok": ("✓", "green"),
}


def render_text(facts: DoctorFacts, diagnosis: Diagnosis, colour: bool = False) -> str:
    """``bir doctor`` for a person: the replay block loudly first, then each finding with its fix."""
    from bir.hooks.commands.switches import describe_allow

    if diagnosis.replay_on:
        head = paint("replay: ON", "red", colour) + " — scenario steps may run without permission prompts"
    else:
        head = paint("replay: off", "bold", colour)
    lines = [
        head,
        paint(f"allowlist: {describe_allow(diagnosis.allow)}", "bold", colour),
        f"BIR_MIN_STEER_SIMILARITY: {facts.min_steer_similarity}",
        f"derives parameters: {diagnosis.deriver}",
        "",
    ]
    topic = None
    for finding in diagnosis.findings:
        if finding.topic != topic:
            topic = finding.topic
            lines.append(paint(topic, "bold", colour))
        mark, hue = _MARKS[finding.level]
        line = f"  {paint(mark, hue, colour)} {finding.text}"
        if finding.fix:
            line += f"\n      fix: {finding.fix}"
        lines.append(line)
    broken = sum(f.level == "broken" for f in diagnosis.findings)
    warnings = sum(f.level == "warning" for f in diagnosis.findings)
    lines.append("")
    if broken:
        lines.append(paint(f"{broken} broken, {warnings} warning{'s' if warnings != 1 else ''}", "red", colour))
    else:
        lines.append(paint(f"nothing broken, {warnings} warning{'s' if warnings != 1 else ''}", "green", colour))
    return "\n".join(lines)


def add_parser(sub: Subparsers) -> None:
    """Register ``bir doctor``."""
    cmd = add_command(
        sub,
        "doctor",
        "what is wrong here, replay first, and the command that fixes each thing",
        ["bir doctor", "bir doctor --json"],
        CHECK_EXIT_CODES,
    )
    project_flag(cmd)
    json_flag(cmd)
    # A bad BIR_* value is one of the doctor's findings, not a refusal to look.
    cmd.set_defaults(run=run, checks_config=False)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir doctor``; 1 when something is broken."""
    with for_command(args) as progress:
        progress("looking at the hooks, the servers, the service and the evaluator…")
        facts = asyncio.run(gather(args.project))
    diagnosis = diagnose(facts)
    if args.json:
        write_json(render_json(facts, diagnosis), sys.stdout)
    else:
        colour = wants_colour(sys.stdout)
        sys.stdout.write(shown(render_text(facts, diagnosis, colour), colour) + "\n")
    return EXIT_FAILED if diagnosis.broken else EXIT_OK
