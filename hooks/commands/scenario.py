"""``bir scenario …`` and ``bir investigate``: thin clients over the service's scenario routes (spec §16.5).

``add_parser`` registers the commands on ``bir``'s parser; ``run`` runs one and answers its exit
status: ``0`` checked OK, saved or undone; ``1`` refused, not found, or a service error; ``2`` usage
(nothing was sent). ``--json`` prints the service's body unchanged on stdout (our own ``{"error", "message"}``
only when no readable body came back); everything else speaks to a person, and the words for a refusal
go to stderr. ``bir scenario replay --dry`` is the service's dry replay (``POST /scenarios/:id/replay``);
without ``--dry`` it is ``bir replay`` and is dispatched by the CLI.

A logic file is checked here before anything is sent: it must compile, and where the step carries the
recording's values (``sample``) it must return a plain object on them. A body that does not compile is
refused before any request; one that fails on the sample is refused before the check or the save.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import anyio

from bir.core import config, installed
from bir.core.errors import LogicError
from bir.core.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_MISSING_TARGET, EXIT_OK, EXIT_USAGE
from bir.core.log import log_to_file, logs_dir, restored, set_stream
from bir.core.paths import resolve_project
from bir.core.printable import printable, printable_json
from bir.core.scenario_api import EDIT_PREFIX, RUN_PREFIX, SCENARIO_PREFIX, Reply, ScenarioApi
from bir.core.service import ServiceClient, ServiceError
from bir.core.truncate import one_line
from bir.hooks.commands import scenario_store
from bir.hooks.commands.progress import for_command
from bir.hooks.commands.replay import plan_flags, run_plan
from bir.hooks.commands.result import (
    REPLAY_EXIT_CODES,
    CommandError,
    add_command,
    log_for_later,
    print_result,
    project_flag,
    verbose_flag,
    write_json,
)
from bir.hooks.commands.scenario_render import (
    Style,
    dry_replay_sentence,
    problem_lines,
    render_dry_replay,
    render_edits,
    render_investigation,
    render_runs,
    render_scenario,
    render_step,
)
from bir.hooks.commands.term import shown, wants_colour
from bir.hooks.local import local_client, open_local_service, wants_local
from bir.hooks.local.store import StoreError

MAX_LOGIC_BYTES: Final = 256 * 1024
_FIX_LOGIN: Final = "sign in again with `bir login`, or set BIR_TOKEN"

# The ids are those of one run of the packaged fleet-direct scenario (`bir replay --list`), run_fleet, whose
# scenario is scn_fleet: on the BaseIn service, or (match, forget) in the local store.
_LIMIT_5: Final = "echo 'return { region: params.region, limit: 5 };'"
EXAMPLES: Final[dict[str, tuple[str, ...]]] = {
    "list": ("bir scenario list",),
    "match": (
        'bir scenario match "find the riskiest device in us-east-1"',
        'bir scenario match "find the riskiest device in sa-east-1" --json',
    ),
    "forget": ("bir scenario forget scn_fleet",),
    "export": ("bir scenario export bir-store.json", "bir scenario export bir-store.json --force --json"),
    "import": ("bir scenario import bir-store.json",),
    "show": ("bir scenario show run_fleet", "bir scenario show scn_fleet --step 1 --json"),
    "calc": ("bir scenario calc run_fleet",),
    "replay": (
        'bir scenario replay scn_fleet --prompt "find the riskiest device in eu-west-1" --dry',
        'bir scenario replay scn_fleet --prompt "the same for us-east-1" --param region=us-east-1 '
        "--wrap fleet='python -m bir.examples.fleet_server'",
    ),
    "check": (f"{_LIMIT_5} | bir scenario check scn_fleet --step 0 --input-logic -",),
    "edit": (f"{_LIMIT_5} | bir scenario edit scn_fleet --step 0 --input-logic -",),
    "edits": ("bir scenario edits scn_fleet",),
    "undo": ("bir scenario undo scn_fleet --step 0",),
    "editing": ("bir scenario editing on",),
    "investigate": ("bir investigate scn_fleet",),
}
EXIT_CODES: Final = f"""exit codes:
  {EXIT_OK}    checked OK, saved or undone
  {EXIT_FAILED}    refused, not found, or a service error (the message says what to do next)
  {EXIT_USAGE}    usage: a bad option or BIR_* value (nothing was sent)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
# Without --dry, `bir scenario replay` is `bir replay`: its exit codes, plus --dry's own.
REPLAY_CODES: Final = REPLAY_EXIT_CODES.replace(
    "the run stopped, was refused, or failed",
    "the run (or --dry, the service's dry replay) stopped, was refused, or failed",
)


class UsageError(ValueError):
    """The command line cannot be used; nothing was sent."""


class Stop(Exception):
    """The command ends here with ``code``; its words were already written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- the parser -------------------------------------------------------------------------------------


def _sub(sub: Any, name: str, helptext: str) -> argparse.ArgumentParser:
    codes = REPLAY_CODES if name == "replay" else EXIT_CODES
    parser = add_command(sub, name, helptext, EXAMPLES[name], codes)
    return parser


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the service's answer unchanged")
    verbose_flag(parser, "scenario.log")


def _logic_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step", type=int, required=True, metavar="N", help="the step's index")
    parser.add_argument("--input-logic", metavar="FILE", help="new toolInputLogic from FILE, or - for stdin")
    parser.add_argument("--output-logic", metavar="FILE", help="new toolOutputLogic from FILE, or - for stdin")
    parser.add_argument("--unfreeze", action="store_true", help="lift a mark made by hand (--freeze)")


def add_parser(sub: Any) -> None:
    """Register ``bir scenario …`` and ``bir investigate`` on the CLI's subparsers."""
    top = add_command(
        sub,
        "scenario",
        "read, recalculate, replay and hand-edit scenarios on the service (owner only)",
        ("bir scenario list", "bir scenario show run_fleet --step 1"),
        EXIT_CODES,
    )
    cmds = top.add_subparsers(dest="scenario_command", required=True)
    _json_flag(_sub(cmds, "list", "recorded runs, their iterations and scenario state"))
    show = _sub(cmds, "show", "a scenario's intent, parameters, steps and logic (by run_ or scn_ id)")
    show.add_argument("target", help="a run_ id (its whole-run scenario) or a scn_ id")
    show.add_argument("--step", type=int, metavar="N", help="only step N, with scenarioId and chainRevision first")
    _json_flag(show)
    calc = _sub(cmds, "calc", "derive a run's scenario, or re-derive one in place")
    calc.add_argument("target", help="a run_ id, or a scn_ id (needs --force)")
    calc.add_argument("--force", action="store_true", help="re-derive in place")
    calc.add_argument("--discard-edits", action="store_true", help="with --force: re-derive a plan with hand edits")
    _json_flag(calc)
    rp = _sub(
        cmds,
        "replay",
        "run a scenario's plan (bir replay --scenario); with --dry, the service's dry replay on the recorded outputs",
    )
    rp.add_argument("scenario", help="a scn_ id (or, without --dry, a scenario file or a packaged name)")
    rp.add_argument("--prompt", required=True, help="the request the scenario is replayed for")
    # --dry here is the service's dry replay (POST /scenarios/:id/replay): the stored logic over the source
    # run's recorded outputs; no tool runs, nothing is written. The rest is bir replay's.
    plan_flags(rp, dry_help="the service's dry replay: the stored logic over the source run's recorded outputs")
    project_flag(rp)
    check = _sub(cmds, "check", "try a change to a step against the recording; writes nothing")
    check.add_argument("target", help="a run_ or scn_ id")
    _logic_flags(check)
    _json_flag(check)
    edit = _sub(cmds, "edit", "the same check, then save the change")
    edit.add_argument("target", help="a run_ or scn_ id")
    _logic_flags(edit)
    edit.add_argument("--freeze", action="store_true", help="mark the step by hand: a recalculation keeps it")
    edit.add_argument("--force", action="store_true", help="save although the check has problems (needs --note)")
    edit.add_argument("--note", help="why (required with --force)")
    edit.add_argument("--revision", type=int, metavar="N", help="the chainRevision the change was made against")
    _json_flag(edit)
    edits = _sub(cmds, "edits", "a scenario's edit history, newest first")
    edits.add_argument("target", help="a run_ or scn_ id")
    _json_flag(edits)
    undo = _sub(cmds, "undo", "take back the newest edit (of step N), or one edit by its id")
    undo.add_argument("target", help="a run_ or scn_ id")
    which = undo.add_mutually_exclusive_group()
    which.add_argument("--edit", metavar="SEDIT", help="the sedit_ id to take back (an undo entry: redo)")
    which.add_argument("--step", type=int, metavar="N", help="the newest edit of step N")
    undo.add_argument("--force", action="store_true", help="undo although it breaks later steps (needs --note)")
    undo.add_argument("--note", help="why (required with --force)")
    _json_flag(undo)
    matching = _sub(cmds, "match", "which local scenario a prompt would match, by which rule, with which values")
    matching.add_argument("prompt", help="the request, as a user would type it")
    matching.add_argument("--project", default=".", help="the project directory (default: the working directory)")
    _json_flag(matching)
    forget = _sub(cmds, "forget", "forget a local scenario (or run): it, its runs, edits and open tickets")
    forget.add_argument("target", help="a scn_ or run_ id")
    _json_flag(forget)
    exporting = _sub(
        cmds, "export", "write the local store (runs, scenarios, edits, bookings) to FILE as one JSON document"
    )
    exporting.add_argument("file", type=Path, help="the file to write (0600; it holds your prompts and tool outputs)")
    exporting.add_argument("--force", action="store_true", help="replace FILE when it exists")
    exporting.add_argument("--json", action="store_true", help="print one JSON document: the file, its size, its rows")
    importing = _sub(cmds, "import", "add what an exported store holds to the local store (rows it has are kept)")
    importing.add_argument("file", type=Path, help="a file `bir scenario export` wrote")
    importing.add_argument("--json", action="store_true", help="print one JSON document: the rows added and kept")
    editing = _sub(cmds, "editing", "which scenario tools the bir MCP server offers in this project")
    editing.add_argument("switch", choices=("on", "off", "status"))
    editing.add_argument("--project", default=".", help="the project directory (default: the working directory)")
    _json_flag(editing)
    inv = _sub(sub, "investigate", "a scenario's state, its marked steps, and every save or undo that was forced")
    inv.set_defaults(command_name="bir investigate")
    inv.add_argument("target", help="a run_ or scn_ id")
    _json_flag(inv)
    top.set_defaults(run=run)
    inv.set_defaults(run=run)


# --- running ----------------------------------------------------------------------------------------


@dataclass
class _Io:
    out: TextIO
    err: TextIO
    as_json: bool
    style: Style
    name: str
    verbose: bool = False

    def say(self, text: str) -> None:
        self.out.write(shown(text, self.style.enabled) + "\n")

    def warn(self, text: str) -> None:
        """Words for a person on stderr; with ``--json`` the document carries them (``--verbose``: both)."""
        if self.as_json and not self.verbose:
            return
        self.err.write(f"{self.name}: {printable(text)}\n")

    def refuse(self, code: str, text: str) -> None:
        """A refusal of our own: its document with ``--json``, and its words."""
        if self.as_json:
            self.json_doc({"error": code, "message": text})
        self.warn(text)

    def body(self, reply: Reply) -> None:
        """``--json``: the service's body unchanged, or our own error document when it is not JSON."""
        if reply.data() is None:
            self.json_doc({"error": "bad_answer", "status": reply.status, "message": "the answer is not JSON"})
        else:
            self.out.write(printable_json(reply.text().rstrip("\n")) + "\n")

    def json_doc(self, doc: Mapping[str, Any]) -> None:
        write_json(doc, self.out)


def run(
    args: argparse.Namespace, settings: config.Settings, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one ``bir scenario`` command or ``bir investigate``; answer its exit (``replay`` without
    ``--dry`` runs the plan as ``bir replay --scenario`` does)."""
    if args.command == "scenario" and args.scenario_command == "replay" and not args.dry:
        return run_plan(args, settings)
    with restored():
        return _run_command(args, settings, out or sys.stdout, err or sys.stderr)


def _run_command(args: argparse.Namespace, settings: config.Settings, out: TextIO, err: TextIO) -> int:
    name = "bir investigate" if args.command == "investigate" else f"bir scenario {args.scenario_command}"
    verbose = bool(getattr(args, "verbose", False))
    io = _Io(out, err, bool(getattr(args, "json", False)), Style(wants_colour(out)), name, verbose)
    try:
        if args.command == "scenario" and args.scenario_command == "editing":
            return _editing(args, io)
        if args.command == "scenario" and args.scenario_command in ("export", "import"):
            log_for_later()
            return _store_file(args, io, settings)
        if verbose:
            set_stream(err)
        else:
            log_to_file(logs_dir(settings.home) / "scenario.log")
    except UsageError as exc:
        io.refuse("usage", str(exc))
        return EXIT_USAGE
    except (OSError, installed.StoreError) as exc:
        io.refuse("cannot_write", f"cannot write under {settings.home}: {exc}")
        return EXIT_FAILED
    try:
        with for_command(args) as progress:
            progress("asking the service…")
            return anyio.run(_run, args, io, settings)
    except UsageError as exc:
        io.refuse("usage", f"{exc} (nothing was sent)")
        return EXIT_USAGE
    except Stop as stop:
        return stop.code


async def _run(args: argparse.Namespace, io: _Io, settings: config.Settings) -> int:
    command = "investigate" if args.command == "investigate" else args.scenario_command
    plan = _plan_logic(args) if command in ("check", "edit") else None
    if command == "replay":
        _dry_replay_params(args)
    if plan is not None:
        await plan.compile_check(io)
    if command in ("match", "forget"):
        return await _local_only(command, args, io, settings)
    read_timeout_s = settings.read_timeout_ms / 1000
    # The local service when it is the one in use; a command that only reads needs no model.
    client = (
        local_client(load_model=False, settings=settings) if wants_local(settings) else ServiceClient(settings=settings)
    )
    try:
        async with client as service:
            api = ScenarioApi(service, read_timeout_s=read_timeout_s)
            try:
                handler = _HANDLERS[command]
                return await handler(args, api, io, plan)
            except ServiceError as exc:
                return _no_answer(exc, io)
    except StoreError as exc:
        # The local service's store cannot be opened: said like match and forget say it, not a traceback.
        io.refuse("store_unusable", str(exc))
        return EXIT_FAILED


async def _local_only(command: str, args: argparse.Namespace, io: _Io, settings: config.Settings) -> int:
    """``bir scenario match`` and ``forget``: they read the local store itself (a remote service has neither)."""
    if not wants_local(settings):
        io.refuse(
            "remote_service",
            "this machine uses a remote service; match and forget work on the local one (BIR_SERVICE=local)",
        )
        return EXIT_FAILED
    try:
        async with open_local_service(
            project=resolve_project(getattr(args, "project", ".")), load_model=command == "match", settings=settings
        ) as local:
            if command == "forget":
                removed = await anyio.to_thread.run_sync(local.service.store.forget, args.target)
                if io.as_json:
                    io.json_doc({"forgotten": removed})
                elif removed:
                    io.say(f"Forgot {', '.join(removed)}.")
                else:
                    io.say(f"Nothing is called {args.target} in the local store.")
                return EXIT_OK if removed else EXIT_FAILED
            found = await local.service.explain(args.prompt)
    except StoreError as exc:
        io.refuse("store_unusable", str(exc))
        return EXIT_FAILED
    if io.as_json:
        io.json_doc(found)
    elif found["matched"]:
        io.say(
            f"Matches {found['scenarioId']} by the {found['rule']} rule (similarity {found['similarity']}),"
            f" with {json.dumps(found['params'], ensure_ascii=False)}."
        )
    else:
        io.say(
            "Matches no ready scenario" + (f" (the embedding: {found['embedding']})." if found["embedding"] else ".")
        )
        for near in found["considered"]:
            score = "" if near["score"] is None else f" {near['score']}"
            io.say(f"  {near['scenarioId']} ({near['rule']}{score}): {near['why']}")
    return EXIT_OK if found["matched"] else EXIT_FAILED


def _store_file(args: argparse.Namespace, io: _Io, settings: config.Settings) -> int:
    """``bir scenario export|import FILE``: the local store's own file work, no service involved."""
    try:
        if args.scenario_command == "export":
            result = scenario_store.export_store(args.file.expanduser(), settings, force=args.force)
        else:
            result = scenario_store.import_store(args.file.expanduser(), settings)
    except CommandError as exc:
        io.refuse("usage" if exc.exit_code == EXIT_USAGE else "refused", str(exc))
        return exc.exit_code
    return print_result(result, args.json, io.out)


# --- the service's answers in words -------------------------------------------------------------------


def _no_answer(exc: ServiceError, io: _Io) -> int:
    if exc.kind == "not_configured":
        words = "no BaseIn service is configured: set BIR_AUTH_URL (and BIR_TOKEN), or run `bir login`"
        code = "not_configured"
    elif exc.kind in ("timeout", "unreachable"):
        words = f"cannot reach the BaseIn service ({exc}); check BIR_AUTH_URL and the network, then try again"
        code = "service_unreachable"
    else:
        words = f"the service's answer cannot be used ({exc}); try again, and report it if it persists"
        code = exc.kind
    if io.as_json:
        io.json_doc({"error": code, "message": str(exc)})
    io.warn(words)
    return EXIT_FAILED


def _refusal_words(reply: Reply, target: str, step: int | None) -> str:
    code = reply.error_code()
    data = reply.data()
    step_words = f"step {step}" if step is not None else "the step"
    if reply.status == 401:
        return f"the service refused the token (401): {_FIX_LOGIN}"
    if reply.status == 404 and code == "no_whole_run_scenario" and isinstance(data, dict):
        segments = ", ".join(str(s) for s in (data.get("segments") or [])[:50])
        return f"{target} has no whole-run scenario; its sub-task scenarios are: {segments} (use one of those ids)"
    if reply.status == 404:
        return f"{target} was not found, or is not yours (only its owner sees it); `bir scenario list` shows yours"
    if code == "nothing_to_change":
        return f"nothing to change: {step_words} already has this code and mark"
    if code == "payload_too_large" or reply.status == 413:
        return "the change is too large for the service (413 payload_too_large): shorten the logic"
    if code == "logic_sandbox_unavailable":
        return "the service's logic sandbox is unavailable (503): nothing was checked, saved or undone; try again later"
    if code == "scenario_has_edits":
        return (
            f"{target} has hand edits, which re-deriving would throw away: add --discard-edits to do it anyway"
            f" (see them with `bir scenario edits {target}`)"
        )
    if code == "check_failed":
        return 'not saved: the change fails the check; fix it, or save it on purpose with --force --note "<why>"'
    if code == "undo_refused":
        return (
            "not undone: taking it back would break later steps or the final answer; "
            'undo it anyway with --force --note "<why>"'
        )
    if code == "revision_conflict" and isinstance(data, dict):
        return (
            f"the scenario changed (it is at revision {data.get('chainRevision')}): look again with "
            f"`bir scenario show {target} --step {step}` and retry with --revision {data.get('chainRevision')}"
        )
    if code == "already_undone":
        return "that edit is already undone; `bir scenario edits` shows what can be taken back"
    if code == "note_required":
        return 'a forced change needs a reason: add --note "<why>"'
    if code == "scenario_not_ready" and isinstance(data, dict):
        return (
            f"{target} is not ready ({one_line(str(data.get('state')), 40)}): "
            f"try again when `bir scenario show {target}` says ready"
        )
    if reply.status >= 500:
        return f"the service failed (HTTP {reply.status}); try again later"
    return f"the service refused (HTTP {reply.status}{', ' + code if code else ''}); --json shows its whole answer"


def _refused(reply: Reply, io: _Io, target: str, step: int | None = None) -> Stop:
    if io.as_json:
        io.body(reply)
    elif reply.error_code() in ("check_failed", "undo_refused"):
        data = reply.data()
        report = data.get("report") if isinstance(data, dict) else None
        if isinstance(report, dict):
            io.say("\n".join(["the check found:", *problem_lines(report, io.style)]))
    io.warn(_refusal_words(reply, target, step))
    return Stop(EXIT_FAILED)


def _accepted(reply: Reply, io: _Io, what: str, target: str, step: int | None = None) -> dict[str, Any]:
    """The body of an accepted answer, a JSON object; else the words for the refusal about ``target`` or
    for a malformed answer to ``what``."""
    if not reply.ok:
        raise _refused(reply, io, target, step)
    data = reply.data()
    if not isinstance(data, dict):
        if io.as_json:
            io.body(reply)
        io.warn(f"the service's answer to {what} cannot be read (HTTP {reply.status}, not a JSON object); try again")
        raise Stop(EXIT_FAILED)
    return data


def _kind(target: str) -> str:
    if target.startswith(RUN_PREFIX):
        return "run"
    if target.startswith(SCENARIO_PREFIX):
        return "scenario"
    raise UsageError(f"expected a run_ or scn_ id, got {target[:80]!r}")


async def _resolve(api: ScenarioApi, io: _Io, target: str) -> tuple[str, dict[str, Any], Reply]:
    """A ``run_`` id's whole-run scenario or a ``scn_`` id's scenario: its id, its body, the reply."""
    reply = await (api.run_scenario(target) if _kind(target) == "run" else api.scenario(target))
    data = _accepted(reply, io, "show", target)
    scenario_id = data.get("id")
    if not isinstance(scenario_id, str) or not scenario_id.startswith(SCENARIO_PREFIX):
        if io.as_json:
            io.body(reply)
        io.warn(f"the service's scenario for {target} has no scn_ id; try again, and report it if it persists")
        raise Stop(EXIT_FAILED)
    return scenario_id, data, reply


def _find_step(data: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    for step in data.get("steps") or []:
        if isinstance(step, dict) and step.get("stepIndex") == index:
            return step
    return None


def _no_step(io: _Io, scenario_id: str, data: Mapping[str, Any], index: int) -> Stop:
    have = ", ".join(str(s.get("stepIndex")) for s in data.get("steps") or [] if isinstance(s, dict))
    if io.as_json:
        io.json_doc({"error": "no_such_step", "scenarioId": scenario_id, "stepIndex": index})
    io.warn(f"{scenario_id} has no step {index} (its steps: {have or 'none'})")
    return Stop(EXIT_FAILED)


# --- the commands -----------------------------------------------------------------------------------


async def _list(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    reply = await api.list_runs()
    data = _accepted(reply, io, "list", "your runs")
    if io.as_json:
        io.body(reply)
    else:
        io.say(render_runs(data))
    return EXIT_OK


async def _show(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    scenario_id, data, reply = await _resolve(api, io, args.target)
    if args.step is None:
        if io.as_json:
            io.body(reply)
        else:
            io.say(render_scenario(data, io.style))
        return EXIT_OK
    step = _find_step(data, args.step)
    if step is None:
        raise _no_step(io, scenario_id, data, args.step)
    if io.as_json:
        io.json_doc({"scenarioId": scenario_id, "chainRevision": data.get("chainRevision"), **step})
    else:
        io.say(render_step(scenario_id, data.get("chainRevision"), step, io.style))
    return EXIT_OK


async def _calc(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    kind = _kind(args.target)
    if args.discard_edits and not args.force:
        raise UsageError("--discard-edits goes with --force")
    if kind == "scenario" and not args.force:
        raise UsageError(f"recalculating {args.target} in place needs --force")
    if kind == "run":
        reply = await api.calculate(args.target, force=args.force, discard_edits=args.discard_edits)
    else:
        reply = await api.recalculate(args.target, discard_edits=args.discard_edits)
    data = _accepted(reply, io, "calc", args.target)
    if io.as_json:
        io.body(reply)
        return EXIT_OK
    scenario_id = data.get("scenarioId", args.target)
    if data.get("calculated") is False:
        io.say(f"{args.target} already has {scenario_id} ({data.get('state')}); --force re-derives it in place.")
    else:
        io.say(f"Calculating {scenario_id}: see it with `bir scenario show {scenario_id}` when it is ready.")
    return EXIT_OK


def _dry_replay_params(args: argparse.Namespace) -> dict[str, object]:
    """The values ``--param`` gives a dry replay, after the checks that need no service.

    Raises:
        UsageError: the command line cannot be sent.
    """
    if not args.dry:
        raise UsageError("without --dry, bir scenario replay is bir replay")
    if not args.scenario.startswith(SCENARIO_PREFIX):
        raise UsageError(
            f"--dry replays on the service and takes a scn_ id, got {args.scenario[:80]!r}; "
            'for a scenario file, run `bir replay --scenario FILE --prompt "…" --dry`'
        )
    if not args.prompt.strip():
        raise UsageError('--prompt needs the request to replay, e.g. --prompt "find the riskiest device"')
    if args.wrap or args.partial:
        flag = "--wrap" if args.wrap else "--partial"
        raise UsageError(f"{flag} has no use with --dry: the service's dry replay runs no tool")
    # Imported here: the parser is built for every `bir` command, and replay_cmd brings the control server.
    from bir.hooks.replay.command import ReplayUsageError, parse_param

    try:
        return dict(parse_param(text) for text in args.param or [])
    except ReplayUsageError as exc:
        raise UsageError(str(exc)) from None


async def _dry_replay(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    reply = await api.dry_replay(args.scenario, args.prompt, _dry_replay_params(args))
    data = _accepted(reply, io, "replay", args.scenario)
    if io.as_json:
        io.body(reply)
    else:
        io.say(render_dry_replay(data, io.style))
    missing = [str(m)[:80] for m in data.get("missing") or []][:20]
    if missing:
        if io.as_json:
            io.warn(dry_replay_sentence(data))
        return EXIT_MISSING_TARGET
    if data.get("ok") is True and not data.get("error"):
        return EXIT_OK
    error = data.get("error")
    index = error.get("stepIndex") if isinstance(error, dict) else None
    look = (
        f"bir scenario show {args.scenario} --step {index}"
        if isinstance(index, int)
        else f"bir scenario show {args.scenario}"
    )
    io.warn(f"the plan fails on the recording: read it with `{look}`, and try a fix with `bir scenario check`")
    return EXIT_FAILED


async def _edits(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    scenario_id = await _scenario_id(api, io, args.target)
    reply = await api.edits(scenario_id)
    data = _accepted(reply, io, "edits", scenario_id)
    if io.as_json:
        io.body(reply)
    else:
        io.say(render_edits(data))
    return EXIT_OK


async def _scenario_id(api: ScenarioApi, io: _Io, target: str) -> str:
    if _kind(target) == "scenario":
        return target
    return (await _resolve(api, io, target))[0]


async def _investigate(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    scenario_id, data, _ = await _resolve(api, io, args.target)
    edits_reply = await api.edits(scenario_id)
    edits = _accepted(edits_reply, io, "edits", scenario_id)
    if io.as_json:
        io.json_doc({"scenario": data, "edits": edits})
    else:
        io.say(render_investigation(data, edits, io.style))
    return EXIT_OK


async def _undo(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    if args.force and not args.note:
        raise UsageError('--force needs --note "<why>"')
    if args.edit is not None and not args.edit.startswith(EDIT_PREFIX):
        raise UsageError(f"--edit takes a sedit_ id, got {args.edit[:80]!r}")
    scenario_id = await _scenario_id(api, io, args.target)
    edit_id = args.edit
    if edit_id is None:
        edit_id = await _newest_undoable(api, io, scenario_id, args.step)
    body: dict[str, Any] = {}
    if args.force:
        body["force"] = True
    if args.note:
        body["note"] = args.note
    reply = await api.revert(scenario_id, edit_id, body)
    data = _accepted(reply, io, "undo", scenario_id, args.step)
    if io.as_json:
        io.body(reply)
        return EXIT_OK
    found = data.get("edit")
    entry: dict[str, Any] = found if isinstance(found, dict) else {}
    io.say(f"Undid {edit_id} of {scenario_id} (now at revision {data.get('chainRevision')}).")
    if entry.get("id"):
        io.say(f"To redo it: bir scenario undo {scenario_id} --edit {entry['id']}")
    return EXIT_OK


async def _newest_undoable(api: ScenarioApi, io: _Io, scenario_id: str, step: int | None) -> str:
    reply = await api.edits(scenario_id)
    data = _accepted(reply, io, "edits", scenario_id, step)
    for entry in data.get("edits") or []:
        if not isinstance(entry, dict) or entry.get("kind") != "edit" or entry.get("undone"):
            continue
        if step is not None and entry.get("stepIndex") != step:
            continue
        edit_id = entry.get("id")
        if isinstance(edit_id, str) and edit_id:
            return edit_id
    where = f" of step {step}" if step is not None else ""
    if io.as_json:
        io.json_doc({"error": "nothing_to_undo", "scenarioId": scenario_id, "stepIndex": step})
    io.warn(f"nothing to undo{where} in {scenario_id}: no edit is standing (`bir scenario edits {scenario_id}`)")
    raise Stop(EXIT_FAILED)


async def _check_or_edit(args: argparse.Namespace, api: ScenarioApi, io: _Io, plan: _LogicPlan | None) -> int:
    assert plan is not None
    saving = args.scenario_command == "edit"
    scenario_id, data, _ = await _resolve(api, io, args.target)
    step = _find_step(data, args.step)
    if step is None:
        raise _no_step(io, scenario_id, data, args.step)
    await plan.sample_check(io, step, force=bool(getattr(args, "force", False)))
    body = plan.body()
    if saving:
        body.update(_save_fields(args))
        reply = await api.save(scenario_id, args.step, body)
    else:
        reply = await api.check(scenario_id, args.step, body)
    result = _accepted(reply, io, "edit" if saving else "check", scenario_id, args.step)
    if io.as_json:
        io.body(reply)
        return _check_exit(result) if not saving else EXIT_OK
    return _say_saved(result, io, scenario_id, args.step) if saving else _say_checked(result, io, args.step)


def _save_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.freeze:
        fields["freeze"] = True
    if args.force:
        fields["force"] = True
    if args.note:
        fields["note"] = args.note
    if args.revision is not None:
        fields["expectedRevision"] = args.revision
    return fields


def _check_exit(report: Mapping[str, Any]) -> int:
    if report.get("noChange") is True:
        return EXIT_OK
    return EXIT_OK if report.get("ok") is True and not report.get("problems") else EXIT_FAILED


def _say_checked(report: Mapping[str, Any], io: _Io, step: int) -> int:
    if report.get("noChange") is True:
        io.say(f"Nothing would change: step {step} already has this code and mark.")
        return EXIT_OK
    if _check_exit(report) == EXIT_OK:
        io.say(f"Step {step}: the change reproduces the recording. Nothing was saved (`bir scenario edit` saves it).")
        return EXIT_OK
    io.say("\n".join([f"Step {step}: the check found problems:", *problem_lines(report, io.style)]))
    io.warn('a save would be refused; fix the change, or save it on purpose with --force --note "<why>"')
    return EXIT_FAILED


def _say_saved(result: Mapping[str, Any], io: _Io, scenario_id: str, step: int) -> int:
    found = result.get("edit")
    edit: dict[str, Any] = found if isinstance(found, dict) else {}
    forced = " (forced: the check had problems, and this stays on record)" if result.get("forced") else ""
    revision = result.get("chainRevision")
    io.say(f"Saved {edit.get('id')} on step {step} of {scenario_id}, now at revision {revision}{forced}.")
    io.say(f"To take it back: bir scenario undo {scenario_id} --edit {edit.get('id')}")
    return EXIT_OK


# --- logic files, checked here first ------------------------------------------------------------------


@dataclass
class _LogicPlan:
    input_logic: str | None
    output_logic: str | None
    unfreeze: bool

    def bodies(self) -> list[tuple[str, str]]:
        found = []
        if self.input_logic is not None:
            found.append(("toolInputLogic", self.input_logic))
        if self.output_logic is not None:
            found.append(("toolOutputLogic", self.output_logic))
        return found

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.input_logic is not None:
            body["inputLogic"] = self.input_logic
        if self.output_logic is not None:
            body["outputLogic"] = self.output_logic
        if self.unfreeze:
            body["unfreeze"] = True
        return body

    async def compile_check(self, io: _Io) -> None:
        """Refuse a body that does not compile, before any request."""
        for kind, body in self.bodies():
            failure = await _evaluate(kind, body, _placeholder_args(kind))
            if failure is not None and failure.reason == "compile":
                _refuse_locally(io, kind, failure, "")

    async def sample_check(self, io: _Io, step: Mapping[str, Any], *, force: bool) -> None:
        """Run each body on the step's recorded values, when the service sent them (``sample``)."""
        sample = step.get("sample")
        if not isinstance(sample, dict):
            if self.bodies():
                io.warn("the step carries no recorded sample: checked here only that the logic compiles")
            return
        params = sample.get("params") if isinstance(sample.get("params"), dict) else {}
        resp = sample.get("respParams") if isinstance(sample.get("respParams"), dict) else {}
        output = sample.get("toolOutput")
        output_text = output if isinstance(output, str) else json.dumps(output)
        for kind, body in self.bodies():
            args = (params, resp) if kind == "toolInputLogic" else (output_text, params, resp)
            failure = await _evaluate(kind, body, args)
            if failure is None:
                continue
            if force and failure.reason != "compile":
                io.warn(f"{kind} fails on the recorded sample ({failure.message}); sending it anyway (--force)")
                continue
            _refuse_locally(io, kind, failure, " on the recorded sample")


def _placeholder_args(kind: str) -> tuple[object, ...]:
    return ({}, {}) if kind == "toolInputLogic" else ("", {}, {})


async def _evaluate(kind: str, body: str, args: tuple[object, ...]) -> LogicError | None:
    # Imported here: the parser is built for every `bir` command, and most never start a worker.
    from bir.evaluator import EvaluatorPool

    async with EvaluatorPool(workers=1, warm_spares=False) as pool:
        try:
            await pool.evaluate(kind, body, *args)
        except LogicError as exc:
            return exc
    return None


def _refuse_locally(io: _Io, kind: str, failure: LogicError, where: str) -> None:
    if io.as_json:
        io.json_doc(
            {"error": "logic_refused_locally", "kind": kind, "reason": failure.reason, "message": failure.message}
        )
    io.warn(f"{kind} refused here{where} ({failure.reason}: {failure.message}); nothing was sent")
    raise Stop(EXIT_FAILED)


def _read_logic(path: str | None, stdin_used: list[bool]) -> str | None:
    if path is None:
        return None
    if path == "-":
        if stdin_used:
            raise UsageError("only one of --input-logic and --output-logic can be - (stdin)")
        stdin_used.append(True)
        text = sys.stdin.read(MAX_LOGIC_BYTES + 1)
    else:
        try:
            with Path(path).expanduser().open(encoding="utf-8") as handle:
                text = handle.read(MAX_LOGIC_BYTES + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if len(text) > MAX_LOGIC_BYTES:
        raise UsageError(f"{path} is larger than {MAX_LOGIC_BYTES // 1024} KB")
    return text


def _plan_logic(args: argparse.Namespace) -> _LogicPlan:
    _kind(args.target)
    saving = args.scenario_command == "edit"
    if saving and args.force and not args.note:
        raise UsageError('--force needs --note "<why>"')
    if saving and args.freeze and args.unfreeze:
        raise UsageError("--freeze and --unfreeze cannot be given together")
    stdin_used: list[bool] = []
    plan = _LogicPlan(
        _read_logic(args.input_logic, stdin_used), _read_logic(args.output_logic, stdin_used), bool(args.unfreeze)
    )
    if not plan.body() and not (saving and args.freeze):
        what = (
            "--input-logic, --output-logic, --freeze or --unfreeze"
            if saving
            else "--input-logic, --output-logic or --unfreeze"
        )
        raise UsageError(f"nothing to {'save' if saving else 'check'}: give {what}")
    return plan


# --- the editing switch (no route) --------------------------------------------------------------------


def _editing(args: argparse.Namespace, io: _Io) -> int:
    project = resolve_project(args.project)
    current = installed.project(project)
    if args.switch != "status":
        if current is None:
            io.refuse("not_installed", f"bir is not installed in {project}: run `bir install --replay` there first")
            return EXIT_FAILED
        current = installed.update(project, editing=args.switch == "on")
    editing = current is not None and current.editing
    if io.as_json:
        io.json_doc({"project": str(project), "installed": current is not None, "editing": editing})
    elif editing:
        io.say(f"Scenario editing is on in {project}: the bir MCP server offers scenario_show, scenario_edits,")
        io.say("investigate, scenario_check, scenario_edit and scenario_undo (running sessions see it within seconds).")
    else:
        io.say(f"Scenario editing is off in {project}: the bir MCP server offers only run_scenario.")
    return EXIT_OK


_HANDLERS: Final = {
    "list": _list,
    "show": _show,
    "calc": _calc,
    "check": _check_or_edit,
    "edit": _check_or_edit,
    "edits": _edits,
    "undo": _undo,
    "investigate": _investigate,
    "replay": _dry_replay,
}
