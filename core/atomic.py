"""Replacing a file whole: a temp file beside it, then ``os.replace``, so a reader sees the old bytes or the
new ones and never half of either. Standard library only (``bir-hook`` reaches it through ``installed``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data``, the new file created with ``mode``.

    ``durable`` flushes the file to disk before the rename, so the replacement also survives a crash
    of the machine, not only of the process.

    Raises:
        OSError: the file cannot be written (the temp file is removed).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".bir-tmp", dir=path.parent)
    try:
        # mkstemp creates the file 0600 already; the mode is said rather than relied on.
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
