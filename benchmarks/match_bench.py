"""``bir bench match``: the local service's matcher and calculator, measured side by side in one run.

- a store of 10,000 ready scenarios (1,000 with ``--quick``) on disk, loaded into the matcher's index;
  the matcher corpus's own scenarios among them with their real embeddings, the fillers with distinct
  synthetic templates and random unit vectors (a vector costs the scan the same, whatever it holds);
- the match's latency through the service (index refresh, cascade, the embedding where the cascade asks
  for it) over a mix of same-task, paraphrase, other-task and unrelated prompts: p50/p99 of all, and of
  the prompts that needed the model;
- the memory the matcher adds to the process (the model, numpy and the 10,000-scenario index) and the
  model's load time;
- the accuracy on the matcher corpus: this matcher's cascade beside the service's rule (spec §2.1: the
  best raw-prompt cosine ≥ 0.9);
- a 10-step run's calculation: tracing, bodies and the self-check in the real pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bir.benchmarks.machine import machine_facts
from bir.benchmarks.match_corpus import PAIRS, RECORDED, corpus_index, scenario_of
from bir.core import config

SERVICE_THRESHOLD = 0.9
_WORDS = [
    "alarm",
    "alert",
    "api",
    "archive",
    "audit",
    "backup",
    "badge",
    "batch",
    "bucket",
    "build",
    "cache",
    "camera",
    "cart",
    "channel",
    "chart",
    "check",
    "cluster",
    "commit",
    "config",
    "console",
    "contract",
    "coupon",
    "cron",
    "dashboard",
    "database",
    "deploy",
    "device",
    "disk",
    "domain",
    "draft",
    "driver",
    "email",
    "endpoint",
    "event",
    "export",
    "feature",
    "feed",
    "file",
    "firewall",
    "flag",
    "folder",
    "form",
    "gateway",
    "grant",
    "graph",
    "group",
    "host",
    "image",
    "incident",
    "index",
    "invoice",
    "issue",
    "job",
    "key",
    "label",
    "lease",
    "license",
    "link",
    "list",
    "log",
    "mailbox",
    "metric",
    "mirror",
    "model",
    "module",
    "monitor",
    "mount",
    "network",
    "node",
    "note",
    "order",
    "owner",
    "package",
    "page",
    "panel",
    "partner",
    "patch",
    "payment",
    "peer",
    "permit",
    "pipeline",
    "plan",
    "playbook",
    "plugin",
    "policy",
    "pool",
    "port",
    "post",
    "printer",
    "process",
    "profile",
    "project",
    "queue",
    "quota",
    "rate",
    "record",
    "region",
    "release",
    "report",
    "repo",
    "request",
    "role",
    "route",
    "rule",
    "runner",
    "schedule",
    "schema",
    "secret",
    "segment",
    "sensor",
    "server",
    "service",
    "session",
    "shard",
    "sheet",
    "shift",
    "signal",
    "site",
    "sketch",
    "slot",
    "snapshot",
    "source",
    "space",
    "sprint",
    "stack",
    "stage",
    "stream",
    "subnet",
    "survey",
    "switch",
    "table",
    "tag",
    "target",
    "task",
    "team",
    "tenant",
    "test",
    "thread",
    "ticket",
    "timer",
    "token",
    "topic",
    "trace",
    "tunnel",
    "user",
    "vault",
    "vendor",
    "version",
    "volume",
    "webhook",
    "widget",
    "worker",
    "zone",
]
_VERBS = ("list", "show", "count", "find", "close", "restart", "delete", "export", "archive", "update")
_QUALIFIERS = ("open", "failed", "stale", "pending", "active", "expired", "blocked", "new", "slow", "largest")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _filler_prompts(count: int, rng: random.Random) -> list[tuple[str, dict[str, str]]]:
    seen: set[str] = set()
    out: list[tuple[str, dict[str, str]]] = []
    while len(out) < count:
        verb, qual = rng.choice(_VERBS), rng.choice(_QUALIFIERS)
        a, b = rng.sample(_WORDS, 2)
        value = f"{rng.choice(_WORDS)}-{rng.randrange(1, 999)}"
        prompt = f"{verb} the {qual} {a} entries of {b} {value}"
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append((prompt, {"target": value}))
    return out


def _queries(rng: random.Random, count: int) -> list[tuple[str, str]]:
    base = [(p.kind, p.new) for p in PAIRS]
    return [rng.choice(base) for _ in range(count)]


def run_match_bench(*, quick: bool, as_json: bool, progress: Callable[[str], None] = lambda _: None) -> int:
    """Run the bench and print its report (words, or JSON with ``as_json``); 0 when it ran. The service's
    log lines go to ``<BIR_HOME>/logs/bench.log``; ``progress`` hears each part as it starts."""
    from bir.core.log import logging_to, logs_dir

    with logging_to(logs_dir(config.home()) / "bench.log"):
        report = asyncio.run(_bench(quick=quick, progress=progress))
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if as_json else render(report))
    return 0


async def _bench(*, quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    load_before = os.getloadavg()
    process = psutil.Process()
    rss_start = process.memory_info().rss
    from bir.hooks.local.embed import MiniLM

    progress("loading the embedding model…")
    began = time.perf_counter()
    model = MiniLM.load()
    load_s = time.perf_counter() - began
    rss_model = process.memory_info().rss
    size = 1_000 if quick else 10_000
    with tempfile.TemporaryDirectory(prefix="bir-bench-match-") as tmp:
        store_s, index_s, service_report = await _with_store(Path(tmp), model, size, quick, progress)
        rss_index = process.memory_info().rss
    progress(f"accuracy on {len(PAIRS)} pairs of prompts…")
    accuracy = _accuracy(model)
    calc = await _calculation(runs=3 if quick else 10, progress=progress)
    return {
        "bench": "match",
        "quick": quick,
        "store": {"scenarios": size, "write_s": round(store_s, 3), "index_load_s": round(index_s, 3)},
        "model": {"load_s": round(load_s, 3), "added_mb": round((rss_model - rss_start) / 2**20, 1)},
        "matcher_added_mb": round((rss_index - rss_start) / 2**20, 1),
        "match": service_report,
        "accuracy": accuracy,
        "calculation": calc,
        "goals": {
            "match_p50_ms": 15,
            "match_p99_ms": 50,
            "matcher_added_mb": 150,
            "model_load_s": 1.0,
            "ten_step_calculation_s": 1.0,
        },
        "machine": machine_facts(load_before),
    }


def _rows(model: Any, size: int, rng: random.Random) -> list[tuple[str, str, list[Any], Any]]:
    import numpy as np

    from bir.benchmarks.match_corpus import params_of
    from bir.hooks.local import match
    from bir.hooks.local.calculate import template_of

    rows: list[tuple[str, str, list[Any], Any]] = []
    for prompt, values in RECORDED.items():
        params = params_of(prompt, values)
        text = match.masked_template(template_of(prompt, params), {p.name: p.sample for p in params})
        rows.append((scenario_of(prompt), prompt, params, model.embed(text)))
    for i, (prompt, values) in enumerate(_filler_prompts(size - len(rows), rng)):
        raw = np.random.default_rng(i).standard_normal(384).astype(np.float32)
        rows.append((f"scn_fill{i}", prompt, params_of(prompt, values), raw / np.linalg.norm(raw)))
    return rows


def _fill(store: Any, rows: list[tuple[str, str, list[Any], Any]]) -> None:
    from bir.hooks.local.calculate import template_of
    from bir.hooks.local.slots import normalized

    with store.raw() as conn:
        conn.execute("BEGIN IMMEDIATE")
        for n, (scenario_id, prompt, params, vector) in enumerate(rows):
            run_id = "run_" + scenario_id.removeprefix("scn_")
            body = {
                "intent": prompt,
                "steps": [],
                "paramsObject": {
                    p.name: {"sampleValue": p.sample, "description": "", "role": "target"} for p in params
                },
            }
            conn.execute(
                "INSERT INTO runs (id, project, input, created_at) VALUES (?, ?, ?, ?)",
                (run_id, "/p", prompt, float(n)),
            )
            conn.execute(
                "INSERT INTO scenarios (id, project, run_id, state, body, template, normalized, embedding, changed, "
                "created_at, updated_at) VALUES (?, '/p', ?, 'ready', ?, ?, ?, ?, ?, ?, ?)",
                (
                    scenario_id,
                    run_id,
                    json.dumps(body),
                    json.dumps({**template_of(prompt, params), "samples": {p.name: p.sample for p in params}}),
                    normalized(prompt),
                    vector.tobytes(),
                    n + 1,
                    float(n),
                    float(n),
                ),
            )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'changed'", (len(rows),))
        conn.execute("COMMIT")


async def _with_store(
    home: Path, model: Any, size: int, quick: bool, progress: Callable[[str], None]
) -> tuple[float, float, dict[str, Any]]:
    import httpx

    from bir.core.service import ServiceClient
    from bir.hooks.local import LOCAL_URL
    from bir.hooks.local.app import build_app
    from bir.hooks.local.embed import Embedder
    from bir.hooks.local.runtime import LocalService
    from bir.hooks.local.store import Store

    rng = random.Random(18)
    store = Store(home / "store.db")
    progress(f"writing {size:,} scenarios to a store…")
    began = time.perf_counter()
    _fill(store, _rows(model, size, rng))
    store_s = time.perf_counter() - began
    embedder = Embedder(load=lambda: model)
    embedder.start()
    embedder.wait(5.0)
    asked: list[int] = []
    cached_embed = embedder.embed
    variant = {"cached": False}

    def counting(text: str) -> Any:
        asked.append(1)
        # "before": every call a forward pass, as the matcher was; "after": through the embedder's cache.
        return cached_embed(text) if variant["cached"] else model.embed(text)

    embedder.embed = counting  # type: ignore[method-assign]
    samples: dict[str, list[tuple[str, float, str]]] = {"before": [], "after": []}
    try:
        async with LocalService(store, project="/p", embedder=embedder) as service:
            progress(f"loading the index of {size:,} scenarios…")
            began = time.perf_counter()
            service.find("warm the index", "/p")
            index_s = time.perf_counter() - began
            transport = httpx.ASGITransport(app=build_app(service))
            queries = _queries(rng, 60 if quick else 400)
            block = 20 if quick else 50
            async with ServiceClient(LOCAL_URL, "local", transport=transport) as client:
                # Side by side: each block of prompts is matched without the cache, then with it, so the
                # machine's load drifts under both alike; the cache lives on across blocks, as in a server.
                for start in range(0, len(queries), block):
                    progress(f"matching prompts {start + 1}-{min(start + block, len(queries))} of {len(queries)}…")
                    for name in ("before", "after"):
                        variant["cached"] = name == "after"
                        for n, (kind, prompt) in enumerate(queries[start : start + block], start):
                            calls, hits = len(asked), embedder.hits
                            t0 = time.perf_counter()
                            await client.match(f"run_{name}{n}", prompt, {"cwd": "/p"})
                            took = (time.perf_counter() - t0) * 1000
                            path = "none" if len(asked) == calls else "cached" if embedder.hits > hits else "cold"
                            samples[name].append((kind, took, path))
    finally:
        store.close()
    rounds = 1 if quick else 3
    progress(f"the model's forward pass, {rounds} rounds…")
    forward = _forward_pass(model, rounds=rounds)
    after, before = _summary(samples["after"]), _summary(samples["before"])
    report = {
        **after,
        "before": before,
        "after_over_before": {q: round(after[q] / before[q], 3) if before[q] else None for q in ("p50_ms", "p99_ms")},
        "forward_pass": forward,
    }
    return store_s, index_s, report


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "prompts": len(values),
        "p50_ms": round(_percentile(values, 0.5), 2),
        "p99_ms": round(_percentile(values, 0.99), 2),
    }


def _summary(samples: list[tuple[str, float, str]]) -> dict[str, Any]:
    """One variant's latencies: all prompts, those that asked the model (a forward pass, or the cache),
    and by kind."""
    every = [took for _, took, _ in samples]
    kinds = sorted({kind for kind, _, _ in samples})
    return {
        **_stats(every),
        "with_embedding": _stats([t for _, t, path in samples if path != "none"]),
        "forward_pass_needed": _stats([t for _, t, path in samples if path == "cold"]),
        "from_the_cache": _stats([t for _, t, path in samples if path == "cached"]),
        "by_kind": {k: _stats([t for kind, t, _ in samples if kind == k]) for k in kinds},
    }


def _forward_pass(model: Any, *, rounds: int) -> dict[str, Any]:
    """The model alone on distinct texts (no cache can help): wall and CPU time of one forward pass."""
    texts = [p.new for p in PAIRS] + [prompt for prompt, _ in _filler_prompts(40, random.Random(7))]
    wall: list[float] = []
    cpu = 0.0
    for _ in range(rounds):
        for text in texts:
            c0, t0 = time.process_time(), time.perf_counter()
            model.embed(text)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu += time.process_time() - c0
    return {
        "texts": len(wall),
        "p50_ms": round(_percentile(wall, 0.5), 2),
        "p99_ms": round(_percentile(wall, 0.99), 2),
        "cpu_ms": round(cpu / len(wall) * 1000, 2),
    }


def _accuracy(model: Any) -> dict[str, Any]:
    from bir.hooks.local import match

    index = corpus_index(model.embed)
    ours = config.load().local_embed_min_similarity
    recorded = list(RECORDED)
    raw = {p: model.embed(p) for p in recorded}
    out: dict[str, dict[str, Any]] = {}
    for pair in PAIRS:
        row = out.setdefault(
            pair.kind,
            {"pairs": 0, "ours_hits": 0, "ours_right": 0, "service_hits": 0, "service_right": 0, "raw_cosines": []},
        )
        row["pairs"] += 1
        found = index.match(pair.new, project="/p", embed=model.embed, min_similarity=ours)
        target = scenario_of(pair.recorded)
        if isinstance(found, match.Hit):
            row["ours_hits"] += 1
            row["ours_right"] += int(found.scenario_id == target and found.values == pair.expected)
        vector = model.embed(pair.new)
        scores = {p: float(vector @ raw[p]) for p in recorded}
        best = max(scores, key=lambda p: scores[p])
        row["raw_cosines"].append(round(scores[pair.recorded], 3))
        if scores[best] >= SERVICE_THRESHOLD:
            row["service_hits"] += 1
            row["service_right"] += int(best == pair.recorded)
    for row in out.values():
        cos = row.pop("raw_cosines")
        row["raw_cosine"] = {"min": min(cos), "median": round(statistics.median(cos), 3), "max": max(cos)}
    return out


async def _calculation(*, runs: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from bir.benchmarks.match_corpus import ten_step_run
    from bir.evaluator import EvaluatorPool
    from bir.hooks.local.calculate import draft_scenario, recorded_steps
    from bir.hooks.local.selfcheck import check

    prompt, steps = ten_step_run()
    times: list[float] = []
    state = ""
    async with EvaluatorPool(workers=1) as pool:
        for n in range(runs):
            progress(f"calculating a ten-step run ({n + 1} of {runs})…")
            began = time.perf_counter()
            verdict = await check(pool, "scn_bench", draft_scenario(prompt, recorded_steps(steps)))
            times.append(time.perf_counter() - began)
            state = verdict.state
    return {
        "steps": len(steps),
        "state": state,
        "runs": runs,
        "p50_s": round(_percentile(times, 0.5), 4),
        "max_s": round(max(times), 4),
    }


def render(report: dict[str, Any]) -> str:
    """The report for a person."""
    m, acc, calc = report["match"], report["accuracy"], report["calculation"]
    b, r, f = m["before"], m["after_over_before"], m["forward_pass"]
    lines = [
        f"bir bench match{' --quick' if report['quick'] else ''}: a store of {report['store']['scenarios']:,} ready "
        f"scenarios (written in {report['store']['write_s']} s, indexed in {report['store']['index_load_s']} s)",
        f"  match, {m['prompts']} prompts through the service: p50 {m['p50_ms']} ms, p99 {m['p99_ms']} ms "
        "(goal 15 / 50 ms)",
        f"    asking the model ({m['with_embedding']['prompts']}): p50 {m['with_embedding']['p50_ms']} ms, "
        f"p99 {m['with_embedding']['p99_ms']} ms; of them a forward pass ({m['forward_pass_needed']['prompts']}): "
        f"p50 {m['forward_pass_needed']['p50_ms']} ms, p99 {m['forward_pass_needed']['p99_ms']} ms, the cache "
        f"({m['from_the_cache']['prompts']}): p50 {m['from_the_cache']['p50_ms']} ms",
        f"  the same prompts in the same run without the vector cache (before): p50 {b['p50_ms']} ms, p99 "
        f"{b['p99_ms']} ms; asking the model ({b['with_embedding']['prompts']}): p50 {b['with_embedding']['p50_ms']}"
        f" ms, p99 {b['with_embedding']['p99_ms']} ms; after/before p50 {r['p50_ms']}x, p99 {r['p99_ms']}x",
        f"  one forward pass on {f['texts']} distinct texts: p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms, "
        f"{f['cpu_ms']} ms of CPU",
        f"  model: loaded in {report['model']['load_s']} s (goal 1 s), {report['model']['added_mb']} MB; "
        f"the matcher with its index adds {report['matcher_added_mb']} MB (goal 150 MB)",
        "  accuracy on the matcher corpus (ours: exact, slot, gated embedding; service: raw cosine >= 0.9):",
    ]
    for kind, row in acc.items():
        lines.append(
            f"    {kind:<15} {row['pairs']:>2} pairs   ours: {row['ours_hits']} hits, {row['ours_right']} with the "
            f"right values   service: {row['service_hits']} hits   raw cosine {row['raw_cosine']['min']}"
            f"/{row['raw_cosine']['median']}/{row['raw_cosine']['max']}"
        )
    lines.append(
        f"  a {calc['steps']}-step run calculates and self-checks in {calc['p50_s']} s p50, {calc['max_s']} s max "
        f"({calc['state']}; goal 1 s)"
    )
    load = report["machine"]
    lines.append(f"  machine: {load['cpus']} cpus, load {load['loadavg_before']} -> {load['loadavg_after']}")
    return "\n".join(lines) + "\n"
