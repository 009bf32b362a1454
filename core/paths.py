"""Where a project's files live under ``BIR_HOME``: its key, its control files, its backups.

Standard library only: the ``bir-hook`` command (which must start fast and import nothing heavy)
shares these rules with the control server, so both find the same files.
"""

from __future__ import annotations

import os
from pathlib import Path


def _sha256_hex(data: bytes) -> str:
    """sha256 from the builtin module, not hashlib's OpenSSL one: loading libcrypto costs ``bir-hook``
    ~2 ms at every tool call, and the digest is the same. hashlib where the builtin is missing."""
    for name in ("_sha256", "_sha2"):  # 3.11, then 3.12+
        try:
            digest = __import__(name).sha256(data).hexdigest()
        except (ImportError, AttributeError):
            continue
        return str(digest)
    import hashlib

    return hashlib.sha256(data).hexdigest()


def resolve_project(project_dir: str | os.PathLike[str]) -> Path:
    """The absolute, symlink-free form of ``project_dir``: the one name every process uses for it."""
    return Path(project_dir).expanduser().resolve()


def project_key(project_dir: str | os.PathLike[str]) -> str:
    """The first 16 hex digits of the sha256 of the resolved project directory."""
    resolved = str(resolve_project(project_dir))
    return _sha256_hex(resolved.encode("utf-8", "surrogateescape"))[:16]


def control_dir(home: Path) -> Path:
    """``<BIR_HOME>/control``: discovery files, revive stamps and server locks."""
    return home / "control"


def discovery_file(home: Path, project_dir: str | os.PathLike[str]) -> Path:
    """``<BIR_HOME>/control/<key>.json``: the live control server's URL and token."""
    return control_dir(home) / f"{project_key(project_dir)}.json"


def revive_stamp(home: Path, project_dir: str | os.PathLike[str]) -> Path:
    """``<BIR_HOME>/control/<key>.revive``: when a hook last started ``bir-hooks revive``."""
    return control_dir(home) / f"{project_key(project_dir)}.revive"


def stall_stamp(home: Path, project_dir: str | os.PathLike[str]) -> Path:
    """``<BIR_HOME>/control/<key>.stalled``: a hook's note that the live server (its pid inside) did not answer."""
    return control_dir(home) / f"{project_key(project_dir)}.stalled"


def server_lock(home: Path, project_dir: str | os.PathLike[str]) -> Path:
    """``<BIR_HOME>/control/<key>.lock``: held (``flock``) by the project's control server for its life."""
    return control_dir(home) / f"{project_key(project_dir)}.lock"


def backups_dir(home: Path, project_dir: str | os.PathLike[str]) -> Path:
    """``<BIR_HOME>/backups/<key>``: copies of the files ``bir install`` changed."""
    return home / "backups" / project_key(project_dir)


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists and is not a zombie (one owned by another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    # An exited child that was not reaped yet still answers signal 0; /proc says it is a zombie.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    state = stat.rpartition(")")[2].split()
    return not (state and state[0] in ("Z", "X"))


def off_file(home: Path) -> Path:
    """``<BIR_HOME>/off``: while it exists the whole runner is out of the way (``bir off`` writes it)."""
    return home / "off"
