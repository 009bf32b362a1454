"""The installed-projects store: ``<BIR_HOME>/installed.json``, one entry per project bir is installed in.

Shape: ``{"version": 1, "projects": {"<resolved abs path>": {"installedAt": <epoch ms>, "replay": bool,
"allow": null | [str], "down": bool, "editing": bool, "install": {...}}}}``. ``install`` is what
``bir install`` needs to undo itself (which files it created or changed, their backups, the
local-scope servers it replaced); it is opaque here.

The file is 0600, written atomically (temp file + ``os.replace``), and every read-modify-write holds
an ``flock`` on a sibling lock file, so two commands never lose each other's change. A file that
cannot be read as this shape counts as "no project installed" (logged), and is moved aside to
``installed.json.corrupt-<ms>`` before a fresh one is written, never overwritten.

Standard library only: ``bir-hook`` asks ``is_installed`` / ``down`` on every hook call.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bir.core import config
from bir.core.atomic import write_atomic
from bir.core.home_files import open_private, private_dir, read_private
from bir.core.log import log_event
from bir.core.paths import resolve_project

STORE_VERSION = 1
# Hundreds of projects fit in far less; anything larger is not ours.
MAX_FILE_BYTES = 8 * 1024 * 1024


class _Corrupt(ValueError):
    """The store's file is not this shape."""


class StoreError(OSError):
    """The store could not be written (its folder or file is not writable)."""


@dataclass(frozen=True)
class ProjectSwitches:
    """One installed project's switches. ``installed_at`` is epoch milliseconds."""

    installed_at: int
    replay: bool = False
    allow: tuple[str, ...] | None = None
    down: bool = False
    editing: bool = False
    install: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "installedAt": self.installed_at,
            "replay": self.replay,
            "allow": None if self.allow is None else list(self.allow),
            "down": self.down,
            "editing": self.editing,
            "install": dict(self.install),
        }

    @classmethod
    def from_json(cls, raw: object) -> ProjectSwitches:
        """Raises:
        ValueError: ``raw`` is not a project entry.
        """
        if not isinstance(raw, dict):
            raise _Corrupt("a project entry is not an object")
        installed_at = raw.get("installedAt", 0)
        allow = raw.get("allow")
        install = raw.get("install", {})
        if not isinstance(installed_at, int) or isinstance(installed_at, bool):
            raise _Corrupt("installedAt is not a number")
        if allow is not None and not (isinstance(allow, list) and all(isinstance(a, str) for a in allow)):
            raise _Corrupt("allow is neither null nor a list of strings")
        if not isinstance(install, dict):
            raise _Corrupt("install is not an object")
        flags = {}
        for name in ("replay", "down", "editing"):
            value = raw.get(name, False)
            if not isinstance(value, bool):
                raise _Corrupt(f"{name} is not true or false")
            flags[name] = value
        return cls(
            installed_at=installed_at,
            allow=None if allow is None else tuple(allow),
            install=install,
            **flags,
        )


@dataclass(frozen=True)
class InstalledProjects:
    """The whole store, by resolved project path."""

    projects: Mapping[str, ProjectSwitches] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": STORE_VERSION, "projects": {k: v.to_json() for k, v in self.projects.items()}}


def store_path(home: Path | None = None) -> Path:
    """``<BIR_HOME>/installed.json``."""
    return (home if home is not None else config.home()) / "installed.json"


def _parse(data: bytes) -> InstalledProjects:
    if len(data) > MAX_FILE_BYTES:
        raise _Corrupt("file too large")
    raw = json.loads(data)
    if not isinstance(raw, dict) or not isinstance(raw.get("projects"), dict):
        raise _Corrupt("not an installed-projects document")
    if raw.get("version") != STORE_VERSION:
        raise _Corrupt(f"unknown version {raw.get('version')!r}")
    return InstalledProjects({str(k): ProjectSwitches.from_json(v) for k, v in raw["projects"].items()})


def _read(path: Path) -> tuple[InstalledProjects, bool]:
    """The store, and whether the file on disk is corrupt (present but unusable)."""
    try:
        data = read_private(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return InstalledProjects(), False
    except OSError as exc:
        log_event("installed.unreadable", path=str(path), error=str(exc))
        return InstalledProjects(), False
    try:
        return _parse(data), False
    except (ValueError, TypeError, RecursionError) as exc:
        log_event("installed.corrupt", path=str(path), error=str(exc)[:300])
        return InstalledProjects(), True


def load(home: Path | None = None) -> InstalledProjects:
    """Every installed project; an absent, unreadable or corrupt store reads as none."""
    return _read(store_path(home))[0]


def project(path: str | os.PathLike[str], home: Path | None = None) -> ProjectSwitches | None:
    """The switches of the project at ``path`` (resolved), or None when it is not installed."""
    return load(home).projects.get(str(resolve_project(path)))


def replay_on(switches: ProjectSwitches | None, env_replay: bool | None) -> bool:
    """Replay as every process reads it (D14): the project's stored switch on (``bir install --replay``,
    ``bir replay on``) and ``env_replay`` (the process's ``BIR_REPLAY``) not ``0``."""
    return env_replay is not False and switches is not None and switches.replay


def is_installed(path: str | os.PathLike[str], home: Path | None = None) -> bool:
    """Whether bir is installed in the project at ``path``."""
    return project(path, home) is not None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    private_dir(path.parent)
    fd = open_private(path.with_name(path.name + ".lock"), "update")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, store: InstalledProjects) -> None:
    write_atomic(path, json.dumps(store.to_json(), indent=2, ensure_ascii=False).encode("utf-8") + b"\n")


def _modify(home: Path | None, change: Callable[[InstalledProjects], InstalledProjects]) -> InstalledProjects:
    path = store_path(home)
    try:
        with _locked(path):
            store, corrupt = _read(path)
            new = change(store)
            if new == store and not corrupt:
                return store
            if corrupt:
                aside = path.with_name(f"{path.name}.corrupt-{int(time.time() * 1000)}")
                os.replace(path, aside)
                log_event("installed.moved_aside", path=str(path), to=str(aside))
            _write(path, new)
            return new
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc}") from exc


def update(path: str | os.PathLike[str], home: Path | None = None, **changes: Any) -> ProjectSwitches:
    """Set ``changes`` (``replay=True``, ``down=False``, ``install={...}``, …) on the project at ``path``,
    adding it (installed now) if it is not in the store, and return its new switches.

    Raises:
        StoreError: the store cannot be written.
        TypeError: a change names no switch.
    """
    key = str(resolve_project(path))
    if "allow" in changes and changes["allow"] is not None:
        changes["allow"] = tuple(changes["allow"])

    def change(store: InstalledProjects) -> InstalledProjects:
        current = store.projects.get(key) or ProjectSwitches(installed_at=int(time.time() * 1000))
        projects = dict(store.projects)
        projects[key] = replace(current, **changes)
        return InstalledProjects(projects)

    return _modify(home, change).projects[key]


def remove(path: str | os.PathLike[str], home: Path | None = None) -> bool:
    """Take the project at ``path`` out of the store; True if it was there.

    Raises:
        StoreError: the store cannot be written.
    """
    key = str(resolve_project(path))
    found = False

    def change(store: InstalledProjects) -> InstalledProjects:
        nonlocal found
        found = key in store.projects
        return InstalledProjects({k: v for k, v in store.projects.items() if k != key})

    _modify(home, change)
    return found
