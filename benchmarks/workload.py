"""``bir bench workload [--json] [--quick]``: what bir saves on a realistic stream of work (issue 19 item 5).

A reproducible, shuffled stream (``workload_corpus``: fourteen task templates over the ``fleet`` and
``tracker`` demo servers, four of them distractors that share words with another but need other calls)
goes through the same path a live session takes: a real control server on the local service, a real
``bir-proxy`` per server spoken to as Claude Code speaks to it, real V8 (``scripted_host``). Only the
model is scripted: on a miss it makes the calls the prompt needs; when bir arms a direct plan it calls
``run_scenario`` and, if the plan handed over, makes the rest of the calls itself. Every call that
reaches a server is read back from the servers' call logs, so a *wrong replay* (bir ran calls the prompt
did not need) cannot hide.

The same stream runs under three rules, each from an empty store: ours needing one agreeing run, ours
needing two (``BIR_LOCAL_MIN_RUNS``), and the service's (raw cosine ≥ 0.9 between all-MiniLM-L6-v2
embeddings of the raw prompts, one run; its values found as ours finds them, else the recorded ones).

What the model would have spent is modelled, the same way for a replayed turn and for the turn it
replaced (``MODEL``): each request's input is the turn's context so far (``CONTEXT_TOKENS`` plus what
the tool results added, four characters a token), its output a fixed size by kind, its time
``REQUEST_S`` plus the output at ``OUTPUT_TOKENS_PER_S``; dollars by bir's price table. The seconds saved
add what was measured: a replayed turn's wall time (bir, the proxies, the tools) against the mean wall
time of the same template's turns the model did itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import anyio

from bir.benchmarks import workload_corpus as corpus
from bir.benchmarks.machine import machine_facts
from bir.benchmarks.scripted_host import ScriptedHost
from bir.core import config
from bir.core.log import logs_dir
from bir.core.pricing import cost_usd
from bir.examples import fleet_server, tracker_server

MODEL: Final = "claude-sonnet-4-5"
CONTEXT_TOKENS: Final = 12_000
CALL_OUTPUT_TOKENS: Final = 90
RUN_SCENARIO_OUTPUT_TOKENS: Final = 40
FINAL_OUTPUT_TOKENS: Final = 220
DIRECTIVE_TOKENS: Final = 250
REQUEST_S: Final = 0.6
OUTPUT_TOKENS_PER_S: Final = 60.0
SERVICE_THRESHOLD: Final = 0.9
SEED: Final = 19
FULL: Final = {"per_template": 5, "per_distractor": 3}
QUICK: Final = {"per_template": 3, "per_distractor": 2}


@dataclass(frozen=True)
class Rule:
    name: str
    min_runs: int
    service: bool = False


RULES: Final = (
    Rule("ours, 1 run", 1),
    Rule("ours, 2 runs", 2),
    Rule(f"service: raw cosine >= {SERVICE_THRESHOLD}, 1 run", 1, service=True),
)


# --- the model's side, modelled -------------------------------------------------------------------


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def output_text(call: corpus.Call) -> str:
    """What a call answers, from the servers' own data (for the model's context)."""
    tool, args = call
    try:
        if tool == "mcp__fleet__list_devices":
            return json.dumps(fleet_server.list_devices_in(args["region"], args.get("limit")))
        if tool == "mcp__fleet__get_device":
            return json.dumps(fleet_server.device_by_id(args["id"]))
        if tool == "mcp__tracker__search_issues":
            return json.dumps({"issues": tracker_server.search_issues(args["project"], args.get("status"))})
        if tool == "mcp__tracker__get_issue":
            return json.dumps(tracker_server.issue(args["key"]))
        if tool == "mcp__tracker__list_builds":
            return tracker_server.builds_text(args["pipeline"])
        if tool == "mcp__tracker__get_build_log":
            return tracker_server.build_log(args["build"])
        if tool == "mcp__tracker__who_is_oncall":
            return json.dumps(tracker_server.oncall(args["team"]))
    except Exception as exc:  # noqa: BLE001 - an error result is text too
        return str(exc)
    return ""


def own_turn(calls: Sequence[corpus.Call]) -> list[dict[str, int]]:
    """The requests of a turn the model does itself: one per call, then the answer."""
    requests, context = [], CONTEXT_TOKENS
    for call in calls:
        requests.append(_usage(context, CALL_OUTPUT_TOKENS))
        context += CALL_OUTPUT_TOKENS + len(output_text(call)) // 4
    requests.append(_usage(context, FINAL_OUTPUT_TOKENS))
    return requests


def tokens(requests: Sequence[Mapping[str, int]]) -> int:
    return sum(r["input_tokens"] + r["output_tokens"] for r in requests)


def dollars(requests: Sequence[Mapping[str, int]]) -> float:
    return sum(cost_usd(MODEL, r) for r in requests)


def model_seconds(requests: Sequence[Mapping[str, int]]) -> float:
    return sum(REQUEST_S + r["output_tokens"] / OUTPUT_TOKENS_PER_S for r in requests)


# --- the calls that reached the servers ------------------------------------------------------------


@dataclass
class CallLogs:
    """The two servers' call logs, read from where the last read stopped."""

    paths: tuple[Path, ...]
    offsets: dict[Path, int] = field(default_factory=dict)

    def new(self) -> list[corpus.Call]:
        calls: list[corpus.Call] = []
        for path in self.paths:
            if not path.exists():
                continue
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                data = handle.read()
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            server = "fleet" if "fleet" in path.name else "tracker"
            for raw in data.decode().splitlines():
                line = json.loads(raw)
                tool = {"search_issues": "search_issues", "build_log": "get_build_log", "oncall": "who_is_oncall"}.get(
                    line["tool"], line["tool"]
                )
                args = {k: v for k, v in line["arguments"].items() if v is not None}
                calls.append((f"mcp__{server}__{tool}", args))
        return calls


# --- one turn --------------------------------------------------------------------------------------


@dataclass
class Turn:
    template: str
    occurrence: int
    ideal: bool
    armed: bool
    replayed: bool
    wrong: bool
    handed_over: bool
    tokens: int
    dollars: float
    model_s: float
    wall_s: float
    baseline_tokens: int
    baseline_dollars: float
    baseline_model_s: float


def _normal(calls: Sequence[corpus.Call]) -> list[corpus.Call]:
    return [(tool, {k: v for k, v in args.items() if v is not None}) for tool, args in calls]


async def _turn(host: ScriptedHost, logs: CallLogs, prompt: corpus.Prompt, min_runs: int) -> Turn:
    began = time.monotonic()
    logs.new()
    needed = _normal(prompt.calls)
    armed = await host.prompt(prompt.text)
    requests: list[dict[str, int]] = []
    context = CONTEXT_TOKENS
    done, replayed, wrong, handed_over = 0, False, False, False
    if armed.direct:
        requests.append(_usage(context + DIRECTIVE_TOKENS, RUN_SCENARIO_OUTPUT_TOKENS))
        answer = await host.run_scenario()
        ran = logs.new()
        context += DIRECTIVE_TOKENS + RUN_SCENARIO_OUTPUT_TOKENS + len(str(answer.get("text") or "")) // 4
        whole = answer.get("ok") is True and not answer.get("partial")
        prefix = ran == needed[: len(ran)]
        replayed = whole and ran == needed
        wrong = bool(ran) and (not prefix or (whole and ran != needed))
        handed_over = not whole
        done = len(ran) if prefix and not wrong else 0
    for call in prompt.calls[done:]:
        requests.append(_usage(context, CALL_OUTPUT_TOKENS))
        result = await host.call(call[0], call[1])
        context += CALL_OUTPUT_TOKENS + len(result.text()) // 4
    requests.append(_usage(context, FINAL_OUTPUT_TOKENS))
    await host.end("done", requests, model=MODEL)
    await host.settled()
    baseline = own_turn(prompt.calls)
    return Turn(
        template=prompt.template,
        occurrence=prompt.occurrence,
        ideal=prompt.occurrence >= min_runs,
        armed=armed.direct or armed.steer,
        replayed=replayed,
        wrong=wrong,
        handed_over=handed_over,
        tokens=tokens(requests),
        dollars=dollars(requests),
        model_s=model_seconds(requests),
        wall_s=time.monotonic() - began,
        baseline_tokens=tokens(baseline),
        baseline_dollars=dollars(baseline),
        baseline_model_s=model_seconds(baseline),
    )


# --- the service's rule ----------------------------------------------------------------------------


def service_rule() -> Any:
    """A ``LocalService.find`` that matches as the service does: the raw prompt's embedding against each
    ready scenario's recorded prompt, the best at cosine ≥ ``SERVICE_THRESHOLD``; one run is enough."""
    from bir.hooks.local import match

    vectors: dict[str, Any] = {}

    def find(self: Any, prompt: str, project: str | None, *, wait_for_model: float = 5.0, explain: bool = False) -> Any:
        self.warm()
        if not self.embedder.ready and not self.embedder.wait(30.0):
            return match.Miss(embedding="the model is not loaded")
        asked = self.embedder.embed(prompt)
        best: tuple[float, Any] | None = None
        for cand in list(self.index.by_id.values()):
            if project is not None and cand.project != project:
                continue
            vector = vectors.get(cand.scenario_id)
            if vector is None:
                vector = vectors[cand.scenario_id] = self.embedder.embed(cand.raw_template["text"])
            score = float(asked @ vector)
            if best is None or score > best[0]:
                best = (score, cand)
        if best is None or best[0] < SERVICE_THRESHOLD:
            return match.Miss(embedding="asked")
        score, cand = best
        values = match.derive_values(cand.raw_template, cand.samples, prompt) or dict(cand.samples)
        return match.Hit("embedding", cand.scenario_id, cand.run_id, values, round(score, 4))

    return find


# --- one rule over the stream ----------------------------------------------------------------------


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


async def run_rule(
    rule: Rule,
    prompts: Sequence[corpus.Prompt],
    workdir: Path,
    progress: Callable[[str], None] = lambda _: None,
    errlog: TextIO | None = None,
) -> dict[str, Any]:
    """The stream under ``rule``, from an empty store; its figures (``progress`` hears each prompt; the
    servers' stderr goes to ``errlog``, by default this stderr)."""
    from bir.hooks.local.runtime import stats_of

    home, project = workdir / "home", workdir / "project"
    home.mkdir(mode=0o700)
    project.mkdir()
    logs = CallLogs((workdir / "fleet-calls.jsonl", workdir / "tracker-calls.jsonl"))
    env = {
        "BIR_HOME": str(home),
        "BIR_LOCAL_MIN_RUNS": str(rule.min_runs),
        "FLEET_CALL_LOG": str(logs.paths[0]),
        "TRACKER_CALL_LOG": str(logs.paths[1]),
        "BIR_SERVICE": "local",
    }
    servers = {
        "fleet": [sys.executable, "-m", "bir.examples.fleet_server"],
        "tracker": [sys.executable, "-m", "bir.examples.tracker_server"],
    }
    began = time.monotonic()
    with _environment(env):
        find = service_rule() if rule.service else None
        async with ScriptedHost.open(project, servers, find=find, errlog=errlog) as host:
            turns = []
            for n, prompt in enumerate(prompts, 1):
                progress(f"prompt {n} of {len(prompts)}…")
                turns.append(await _turn(host, logs, prompt, rule.min_runs))
            booked = stats_of(host.local.store, None)["totals"]
    return {
        "rule": rule.name,
        "minRuns": rule.min_runs,
        "seconds": round(time.monotonic() - began, 1),
        **summary(turns),
        "booked": booked,
    }


def summary(turns: Sequence[Turn]) -> dict[str, Any]:
    """The figures of one rule's run of the stream."""
    own_wall: dict[str, list[float]] = {}
    for t in turns:
        if not t.armed:
            own_wall.setdefault(t.template, []).append(t.wall_s)
    mean_own = {k: statistics.fmean(v) for k, v in own_wall.items()}
    replayed = [t for t in turns if t.replayed]
    saved_tokens = sum(t.baseline_tokens - t.tokens for t in replayed)
    saved_usd = sum(t.baseline_dollars - t.dollars for t in replayed)
    saved_s = sum((t.baseline_model_s + mean_own.get(t.template, t.wall_s)) - (t.model_s + t.wall_s) for t in replayed)
    ideal = sum(1 for t in turns if t.ideal)
    n = len(replayed)
    return {
        "prompts": len(turns),
        "replayed": n,
        "ideal": ideal,
        "ofIdeal": round(sum(1 for t in replayed if t.ideal) / ideal, 3) if ideal else None,
        "wrong": sum(1 for t in turns if t.wrong),
        "handedOver": sum(1 for t in turns if t.handed_over),
        "savedTokens": saved_tokens,
        "savedUsd": round(saved_usd, 4),
        "savedSeconds": round(saved_s, 1),
        "perReplayed": {
            "tokens": round(saved_tokens / n) if n else 0,
            "usd": round(saved_usd / n, 4) if n else 0.0,
            "seconds": round(saved_s / n, 2) if n else 0.0,
        },
        "byTemplate": _by_template(turns),
    }


def _by_template(turns: Sequence[Turn]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for t in turns:
        row = out.setdefault(t.template, {"prompts": 0, "replayed": 0, "ideal": 0, "wrong": 0})
        row["prompts"] += 1
        row["replayed"] += int(t.replayed)
        row["ideal"] += int(t.ideal)
        row["wrong"] += int(t.wrong)
    return out


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda text: progress(f"{prefix}: {text}")


async def bench(
    *, quick: bool, progress: Callable[[str], None] = lambda _: None, errlog: TextIO | None = None
) -> dict[str, Any]:
    shape = QUICK if quick else FULL
    prompts = corpus.stream(seed=SEED, **shape)
    before = os.getloadavg()
    rules = RULES[:2] if quick else RULES
    results = []
    with tempfile.TemporaryDirectory(prefix="bir-bench-workload-") as tmp:
        for i, rule in enumerate(rules):
            workdir = Path(tmp) / f"rule{i}"
            workdir.mkdir()
            said = f"rule {i + 1} of {len(rules)} ({rule.name})"
            progress(f"{said}: starting a control server and the proxies…")
            results.append(await run_rule(rule, prompts, workdir, _prefixed(progress, said), errlog))
    return {
        "quick": quick,
        "seed": SEED,
        "prompts": len(prompts),
        "templates": len(corpus.TEMPLATES),
        "distractors": sum(1 for t in corpus.TEMPLATES if t.distractor_of),
        "model": {
            "name": MODEL,
            "contextTokens": CONTEXT_TOKENS,
            "requestS": REQUEST_S,
            "outputTokensPerS": OUTPUT_TOKENS_PER_S,
        },
        "rules": results,
        "machine": machine_facts(before),
    }


def render(report: Mapping[str, Any]) -> str:
    lines = [
        f"bir bench workload{' (quick)' if report['quick'] else ''}: {report['prompts']} prompts from "
        f"{report['templates']} task templates ({report['distractors']} of them distractors), shuffled (seed "
        f"{report['seed']}), through a real control server, bir-proxy, the fleet and tracker servers and V8; "
        f"the model scripted ({report['model']['name']}, modelled)",
        f"{'rule':<36}{'replayed':>9}{'ideal':>7}{'of ideal':>10}{'wrong':>7}{'handed over':>13}"
        f"{'tokens saved':>14}{'$ saved':>10}{'s saved':>9}   per replayed prompt",
    ]
    for r in report["rules"]:
        of = "-" if r["ofIdeal"] is None else f"{r['ofIdeal'] * 100:.0f}%"
        per = r["perReplayed"]
        lines.append(
            f"{r['rule']:<36}{r['replayed']:>9}{r['ideal']:>7}{of:>10}{r['wrong']:>7}{r['handedOver']:>13}"
            f"{r['savedTokens']:>14,}{r['savedUsd']:>10.3f}{r['savedSeconds']:>9.1f}   "
            f"{per['tokens']:,} tokens, ${per['usd']:.4f}, {per['seconds']:.1f} s"
        )
    for r in report["rules"]:
        booked = r["booked"]
        lines.append(
            f"  {r['rule']}: bir stats booked {booked.get('replays', 0)} replays, saved "
            f"${booked.get('savedUsd', 0):.4f} against the recorded runs; {r['seconds']} s for the stream"
        )
    worst = [
        f"{name} ({row['replayed']}/{row['ideal']})"
        for name, row in report["rules"][0]["byTemplate"].items()
        if row["replayed"] < row["ideal"]
    ]
    if worst:
        lines.append("  under ours with one run, templates short of their ideal: " + ", ".join(worst))
    m = report["machine"]
    lines.append(f"  machine: {m['cpus']} cpus, load {m['loadavg_before']} -> {m['loadavg_after']}")
    return "\n".join(lines)


def run_workload_bench(*, quick: bool, as_json: bool, progress: Callable[[str], None] = lambda _: None) -> int:
    """Run the benchmark; exit 1 when ours replayed a wrong call. ``progress`` hears each rule and prompt;
    what the proxies and servers log goes to ``<BIR_HOME>/logs/bench.log``, not the screen."""
    logs = logs_dir(config.home())
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "bench.log").open("a", encoding="utf-8") as errlog:
        report = anyio.run(lambda: bench(quick=quick, progress=progress, errlog=errlog))
    sys.stdout.write((json.dumps(report, indent=2) if as_json else render(report)) + "\n")
    ours = [r for r in report["rules"] if "ours" in r["rule"]]
    return 1 if any(r["wrong"] for r in ours) else 0


__all__ = ["RULES", "Turn", "asdict", "bench", "render", "run_workload_bench", "summary"]
