"""The discovery file: how hooks, proxies and ``bir-scenario`` find a project's control server.

``<BIR_HOME>/control/<key>.json`` (directory 0700, file 0600, written atomically) holds the server's
URL and bearer token. The key is derived from the resolved project directory, so every process
started for the same project finds the same file. A file whose pid is dead, or that cannot be read,
is treated as absent: a crashed server must not send clients to a port someone else may now own.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from bir.core import config
from bir.core.atomic import write_atomic
from bir.core.home_files import private_dir, read_private
from bir.core.log import log_event
from bir.core.paths import pid_alive, project_key

# A discovery file is a few hundred bytes; anything much larger is not ours.
MAX_FILE_BYTES = 64 * 1024


class Discovery(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """What a control server publishes about itself. ``started_at`` is epoch milliseconds."""

    url: str
    token: str
    pid: int
    version: str
    started_at: int
    project: str


_decoder = msgspec.json.Decoder(Discovery)


def discovery_key(project_dir: str | os.PathLike[str]) -> str:
    """The first 16 hex digits of the sha256 of the resolved project directory (``bir.core.paths``)."""
    return project_key(project_dir)


def control_dir(home: Path | None = None) -> Path:
    """``<BIR_HOME>/control`` (or under ``home``: ``bir replay`` announces its own server only there)."""
    return (home if home is not None else config.home()) / "control"


def discovery_path(project_dir: str | os.PathLike[str], home: Path | None = None) -> Path:
    """Where the discovery file of ``project_dir`` lives (whether or not it exists)."""
    return control_dir(home) / f"{discovery_key(project_dir)}.json"


def write_discovery(discovery: Discovery, home: Path | None = None) -> Path:
    """Write the discovery file for ``discovery.project`` atomically, mode 0600, and return its path.

    Raises:
        OSError: the control directory or the file cannot be written.
    """
    private_dir(home if home is not None else config.home(), "control")
    target = discovery_path(discovery.project, home)
    write_atomic(target, msgspec.json.encode(discovery))
    return target


def _load(path: Path) -> Discovery | None:
    try:
        data = read_private(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log_event("control.discovery_unreadable", path=str(path), error=str(exc))
        return None
    if len(data) > MAX_FILE_BYTES:
        log_event("control.discovery_unreadable", path=str(path), error="file too large")
        return None
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        log_event("control.discovery_unreadable", path=str(path), error=str(exc))
        return None


def read_discovery(project_dir: str | os.PathLike[str]) -> Discovery | None:
    """The live control server of ``project_dir``, or None (missing, unreadable, corrupt, or its pid is dead)."""
    discovery = _load(discovery_path(project_dir))
    if discovery is None or not pid_alive(discovery.pid):
        return None
    return discovery


def all_discoveries(home: Path | None = None) -> list[Discovery]:
    """Every live control server announced under ``home`` (default ``BIR_HOME``), oldest first."""
    found: list[Discovery] = []
    try:
        paths = sorted(control_dir(home).glob("*.json"))
    except OSError:
        return found
    for path in paths:
        discovery = _load(path)
        if discovery is not None and pid_alive(discovery.pid) and path == discovery_path(discovery.project, home):
            found.append(discovery)
    return sorted(found, key=lambda d: d.started_at)


def remove_discovery(project_dir: str | os.PathLike[str], pid: int | None = None) -> bool:
    """Remove the discovery file of ``project_dir``; True if a file was removed.

    With ``pid``, the file is removed only if it is that process's, so a server shutting down
    never removes the file of a successor that has already taken its place.
    """
    path = discovery_path(project_dir)
    if pid is not None:
        current = _load(path)
        if current is not None and current.pid != pid:
            return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
