"""Delivering a divergence's bundle in the diverging call's place (spec §8), best channel first.

- **Bash-clean**: a diverging ``Bash`` call's command is rewritten to print the bundle, so the model
  reads ordinary command output. Up to ``BASH_INLINE_MAX`` characters ride inline in a quoted heredoc
  whose delimiter is absent from the text; a longer text is written to a ``0600`` file under
  ``<BIR_HOME>/tmp`` (removed after an hour by ``sweep``) and the command prints that file. The text
  is capped at ``BASH_CHANNEL_MAX``: the host cuts long command output too.
- **Deny-inject**: ``permissionDecision: "deny"`` with the bundle as the reason, capped at
  ``MAX_REPLAY_REASON``. Any tool can carry it; a model reads it as adversarial, hence last.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from bir.core.bundle import BASH_CHANNEL_MAX, BASH_INLINE_MAX, MAX_REPLAY_REASON, bash_heredoc_command, truncate
from bir.core.home_files import open_private, private_dir
from bir.core.printable import printable

TMP_MAX_AGE_S: Final = 3600.0
_PREFIX: Final = "bundle-"


@dataclass(frozen=True)
class Delivery:
    """How a bundle answers the diverging call: a rewritten ``Bash`` command, or a denial's reason."""

    channel: Literal["bash_clean", "deny_inject"]
    command: str | None = None
    reason: str | None = None


def tmp_dir(home: Path) -> Path:
    """``<BIR_HOME>/tmp``: bundles too long for a command line."""
    return home / "tmp"


def deliver(text: str, tool_name: str | None, home: Path) -> Delivery:
    """The best channel for ``text`` in place of a call to ``tool_name``."""
    if tool_name == "Bash":
        # Printed by the shell into the host's terminal: no control character gets there.
        body = truncate(printable(text), BASH_CHANNEL_MAX)
        if len(body) <= BASH_INLINE_MAX:
            return Delivery("bash_clean", command=bash_heredoc_command(body))
        path = _write_private(tmp_dir(home), body)
        if path is not None:
            return Delivery("bash_clean", command=f"cat {shlex.quote(str(path))}")
    return Delivery("deny_inject", reason=truncate(text, MAX_REPLAY_REASON))


def _write_private(folder: Path, text: str) -> Path | None:
    """Write ``text`` to a new ``0600`` file in ``folder``; None when it cannot be written."""
    try:
        private_dir(folder.parent, folder.name)
        sweep(folder)
        path = folder / f"{_PREFIX}{secrets.token_hex(8)}.txt"
        fd = open_private(path, "new")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        return None
    return path


def sweep(folder: Path, max_age_s: float = TMP_MAX_AGE_S, now: float | None = None) -> int:
    """Remove bundle files older than ``max_age_s``; answers how many went. Never raises."""
    cutoff = (time.time() if now is None else now) - max_age_s
    removed = 0
    with contextlib.suppress(OSError):
        for path in folder.glob(f"{_PREFIX}*.txt"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
    return removed
