"""``bir scenario export FILE`` and ``bir scenario import FILE``: the local store as one JSON document.

They sit beside ``forget`` under ``bir scenario`` because they move what scenarios rest on (the runs,
the scenarios, their edits, tickets and bookings); ``bir stats`` only reads figures. The export is the
store's rows as they are, read in one transaction (no embedding: a control server computes those again
when it starts), written ``0600`` and whole or not at all (it holds the user's prompts and tool
outputs). An import adds the rows the store does not have and keeps the ones it has, in one
transaction: a document that does not fit is refused and nothing of it is written. Either works on the
local store whichever service this machine uses.

An imported ``ready`` scenario is matched and replayed like one calculated here, steps run without a
permission prompt included: import only documents that you exported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from bir.core import config
from bir.core.atomic import write_atomic
from bir.core.exits import EXIT_USAGE
from bir.hooks.commands.result import CommandError, CommandResult
from bir.hooks.local import wants_local
from bir.hooks.local.store import Store, StoreError, default_path

# What a person reads first, in this order; the document holds these tables and the ticket book.
_SHOWN: Final = (
    ("runs", "run", "runs"),
    ("scenarios", "scenario", "scenarios"),
    ("edits", "edit", "edits"),
    ("executions", "booking", "bookings"),
    ("tickets", "ticket", "tickets"),
)
# The largest document read: four times the store's own limit holds any export of a store within it.
_READ_FACTOR: Final = 4
_MIN_READ_BYTES: Final = 64 * 1024 * 1024


def _counted(counts: dict[str, int]) -> str:
    parts = [f"{counts.get(key, 0)} {one if counts.get(key, 0) == 1 else many}" for key, one, many in _SHOWN]
    return ", ".join(parts)


def _warnings(settings: config.Settings) -> tuple[str, ...]:
    if wants_local(settings):
        return ()
    return ("this machine uses a remote service; this is the local store's content (BIR_SERVICE=local uses it)",)


def _open(settings: config.Settings, *, create: bool) -> Store:
    path = default_path(settings.home)
    if not create and not path.exists():
        raise CommandError(f"there is no local store at {path} yet: nothing to export")
    try:
        return Store(path)
    except StoreError as exc:
        raise CommandError(str(exc)) from None


def export_store(target: Path, settings: config.Settings, *, force: bool) -> CommandResult:
    """Write the local store to ``target``.

    Raises:
        CommandError: ``target`` exists (without ``force``) or cannot be written; the store cannot be read.
    """
    if target.is_dir():
        raise CommandError(f"{target} is a folder; give a file name, e.g. {target / 'bir-store.json'}", EXIT_USAGE)
    if target.exists() and not force:
        raise CommandError(f"{target} exists; give another file, or --force to replace it", EXIT_USAGE)
    if not target.parent.is_dir():
        raise CommandError(f"cannot write {target}: the folder {target.parent} does not exist", EXIT_USAGE)
    store = _open(settings, create=False)
    try:
        document = store.export()
    except StoreError as exc:
        raise CommandError(str(exc)) from None
    finally:
        store.close()
    data = json.dumps(document, ensure_ascii=False).encode("utf-8")
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise CommandError(f"cannot write {target}: {exc.strerror or exc}") from None
    counts = {table: len(document.get(table) or []) for table, _, _ in _SHOWN}
    ready = sum(1 for row in document.get("scenarios") or [] if row.get("state") == "ready")
    text = (
        f"Exported {_counted(counts)} ({ready} ready) to {target} ({len(data):,} bytes, 0600).\n"
        f"It holds your prompts and tool outputs; `bir scenario import {target}` adds it to a store."
    )
    return CommandResult(
        text=text,
        data={"exported": str(target), "bytes": len(data), "rows": counts, "ready": ready},
        warnings=_warnings(settings),
    )


def _read_document(source: Path, settings: config.Settings) -> dict[str, Any]:
    limit = max(_MIN_READ_BYTES, _READ_FACTOR * settings.local_store_mb * 1024 * 1024)
    try:
        size = source.stat().st_size
        if size > limit:
            raise CommandError(
                f"{source} is {size:,} bytes, more than an export of a store within BIR_LOCAL_STORE_MB can be"
                f" ({limit:,}); nothing was imported",
                EXIT_USAGE,
            )
        raw = source.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {source}: {exc.strerror or exc}", EXIT_USAGE) from None
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise CommandError(f"{source} is not JSON ({exc}); nothing was imported", EXIT_USAGE) from None
    if not isinstance(document, dict):
        raise CommandError(f"{source} is not a bir local store export (not a JSON object); nothing was imported")
    return document


def import_store(source: Path, settings: config.Settings) -> CommandResult:
    """Add what the export at ``source`` holds to the local store.

    Raises:
        CommandError: the file cannot be read or is not JSON (usage), is not an export or does not fit
            the store (refused; nothing was written).
    """
    document = _read_document(source, settings)
    store = _open(settings, create=True)
    try:
        added = store.import_document(document)
    except StoreError as exc:
        raise CommandError(f"{exc}; nothing was imported") from None
    finally:
        store.close()
    kept = {table: len(document.get(table) or []) - count for table, count in added.items()}
    text = f"Imported {_counted(added)} from {source}."
    if any(kept.values()):
        text += f"\nAlready here, and kept as they are: {_counted(kept)}."
    if added.get("scenarios"):
        text += "\nThe imported ready scenarios match from the next prompt; `bir scenario list` shows them."
    return CommandResult(
        text=text, data={"imported": str(source), "added": added, "kept": kept}, warnings=_warnings(settings)
    )
