"""``bir stats [--project DIR] [--json]``: what the local service's scenarios saved (issue 18 item 6).

Per scenario: its runs, its hits, the outcomes its replays were booked as, and the tokens, dollars and
seconds saved against the recorded run's own cost; then the totals and how full the store is. Tokens
are counted where both the recorded run and the replay's report carry their usage (a report from before
reports carried it has none: its tokens are "not known", its dollars and seconds still count). Only the local
service keeps these figures here; with a remote service the command says so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bir.core import config
from bir.core.exits import EXIT_OK
from bir.core.paths import resolve_project
from bir.hooks.commands.result import CommandError, CommandResult, Subparsers, add_command, json_flag, print_result
from bir.hooks.local import wants_local


def add_parser(sub: Subparsers) -> None:
    """Register ``bir stats``."""
    stats = add_command(
        sub,
        "stats",
        "what the local service's scenarios saved: runs, hits, outcomes, tokens, dollars and seconds",
        ["bir stats", "bir stats --project ~/src/app --json"],
    )
    stats.add_argument("--project", help="only this project's scenarios (default: every project's)")
    json_flag(stats)
    stats.set_defaults(run=run)


def _tokens(line: dict[str, Any]) -> str:
    saved, counted, replays = line["savedTokens"], line["tokenReplays"], line["replays"]
    if saved is None:
        return "tokens not known"
    if counted < replays:
        return f"{saved:,} tokens (over {counted} of {replays} replays: the others' reports carry no usage)"
    return f"{saved:,} tokens"


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def _text(data: dict[str, object]) -> str:
    rows = data["scenarios"]
    assert isinstance(rows, list)
    totals = data["totals"]
    assert isinstance(totals, dict)
    lines = [f"bir stats — {len(rows)} scenarios, {totals['hits']} hits, {totals['replays']} replays"]
    for row in rows:
        mix = ", ".join(f"{n} {outcome}" for outcome, n in sorted(row["outcomes"].items())) or "no replays"
        lines.append(
            f"  {row['scenarioId']} ({row['state']}) {row['intent'][:70]!r}: {_runs(row['runs'])}, "
            f"{row['hits']} hits ({mix}); "
            f"saved {_tokens(row)}, ${row['savedUsd']:.4f}, {row['savedSeconds']:.1f} s"
        )
    lines.append(f"saved in all: {_tokens(totals)}, ${totals['savedUsd']:.4f} and {totals['savedSeconds']:.1f} s")
    if totals.get("modelCalls"):
        lines.append(f"model pass: {totals['modelCalls']} calls, ${totals['modelCostUsd']:.4f}")
    store = data["store"]
    assert isinstance(store, dict)
    lines.append(f"store: {store['runs']} runs, {store['ready']} ready scenarios, {store['bytes'] / 2**20:.1f} MB")
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run ``bir stats``."""
    from bir.hooks.local.booking import totals
    from bir.hooks.local.runtime import stats_of
    from bir.hooks.local.store import Store, StoreError, default_path

    if not wants_local(settings):
        raise CommandError(
            "the figures are the local service's, and this machine uses a remote one (BIR_SERVICE=local to read them)",
            code="remote_service",
        )
    path = default_path(settings.home)
    project = str(resolve_project(args.project)) if args.project else None
    if not path.exists():
        data: dict[str, object] = {
            "scenarios": [],
            "totals": totals([]),
            "store": {"runs": 0, "ready": 0, "bytes": 0},
        }
    else:
        try:
            store = Store(path)
        except StoreError as exc:
            raise CommandError(str(exc), code="store_unusable") from None
        try:
            data = stats_of(store, project)
        finally:
            store.close()
    return print_result(CommandResult(text=_text(data), data=data, exit_code=EXIT_OK), args.json, sys.stdout)
