"""A home bir can trust: ``BIR_HOME`` and its folders, and every file bir opens in them (issue 16 item 4).

bir keeps tokens, approved scenarios and the address of a server that approves tool calls under
``BIR_HOME``, so whoever can write there can steer it. Every folder is created 0700 (each missing one,
``BIR_HOME`` included, not only the last) and refused when another user owns it or group or others may
write to it; one that is only readable by others (an older bir made them 0755) is tightened to 0700.

Every file is opened with ``O_NOFOLLOW`` (a planted symlink is refused, never followed) and
``O_NONBLOCK`` (a FIFO or a device cannot hold the process at its ``open``), then checked before a
byte is read or written: a regular file, owned by this user, and for writing not a hard link to
another file (a truncation happens only after that check). Every refusal is a ``HomeError`` (an
``OSError``) whose message is one line naming the path and what to do.

Standard library only: ``bir-hook`` opens its files through here at every tool call.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final, Literal

Mode = Literal["read", "append", "write", "update", "new"]

_FLAGS: Final[dict[Mode, int]] = {
    "read": os.O_RDONLY,
    "append": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "write": os.O_WRONLY | os.O_CREAT,  # truncated after the checks
    "update": os.O_RDWR | os.O_CREAT,  # a lock file: read and written in place
    "new": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}
_COMMON: Final = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class HomeError(OSError):
    """A folder or file under ``BIR_HOME`` that bir will not use; the message is one line."""


def _owner_problem(path: Path, info: os.stat_result) -> str | None:
    if info.st_uid != os.geteuid():
        return f"{path} is owned by another user (uid {info.st_uid}); bir keeps its state only in its own files"
    return None


def check_dir(path: Path) -> None:
    """Refuse ``path`` unless it is a folder of this user that group and others cannot write to; tighten
    one that others may read to 0700.

    Raises:
        FileNotFoundError: it does not exist.
        HomeError: it is not a folder, another user owns it, or group or others may write to it.
    """
    info = os.stat(path)
    problem = _dir_problem(path, info)
    if problem is not None:
        raise HomeError(problem)
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)


def _dir_problem(path: Path, info: os.stat_result) -> str | None:
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder; move it away and bir makes its own"
    problem = _owner_problem(path, info)
    if problem is not None:
        return problem
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        return f"{path} is writable by group or others (mode {mode:04o}); `chmod 700 {path}` fixes it"
    return None


def home_problems(home: Path) -> list[str]:
    """What makes ``home`` or a folder in it one bir refuses to use (``check_dir``'s rules, a folder that is a
    link included), one sentence each; read only, nothing is changed. Empty when all is well or nothing exists."""
    found: list[str] = []
    try:
        problem = _dir_problem(home, os.stat(home))
    except FileNotFoundError:
        return found
    except OSError as exc:
        return [f"{home} cannot be read: {exc.strerror or exc}"]
    if problem is not None:
        return [problem]
    try:
        entries = sorted(home.iterdir())
    except OSError as exc:
        return [f"{home} cannot be listed: {exc.strerror or exc}"]
    for entry in entries:
        try:
            info = os.lstat(entry)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            found.append(f"{entry} is a link; bir never follows one in its home: move it away")
        elif stat.S_ISDIR(info.st_mode):
            problem = _dir_problem(entry, info)
            if problem is not None:
                found.append(problem)
    return found


def private_dir(home: Path, *parts: str) -> Path:
    """``home/parts…``, every missing folder of it (``home`` included) created 0700, each one checked.

    Raises:
        HomeError: a folder on the way is not one bir can trust (see ``check_dir``), or cannot be made.
    """
    path = home
    for part in ("", *parts):
        if part:
            path = path / part
        try:
            check_dir(path)
            continue
        except FileNotFoundError:
            pass
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # made meanwhile by another process: checked below like any other
        except OSError as exc:
            raise HomeError(f"cannot create {path}: {exc.strerror or exc}") from None
        # mkdir's mode is filtered by the umask.
        os.chmod(path, 0o700)
        check_dir(path)
    return path


def open_private(path: Path, mode: Mode) -> int:
    """Open ``path`` (a file under ``BIR_HOME``) for ``mode`` and answer the descriptor, after the checks.

    ``read`` and ``append`` as their names say; ``write`` creates or truncates; ``update`` opens for reading
    and writing in place (a lock); ``new`` creates a file that must not exist. The descriptor is blocking.

    Raises:
        FileNotFoundError: ``read`` of a file that does not exist.
        FileExistsError: ``new`` of a file that exists.
        HomeError: a symlink, not a regular file, another user's, or (to write) a hard link.
        OSError: any other failure to open it.
    """
    try:
        fd = os.open(path, _FLAGS[mode] | _COMMON, 0o600)
    except OSError as exc:
        if exc.errno == getattr(os, "ELOOP", 40):
            raise HomeError(f"{path} is a symbolic link; bir does not follow links in its home") from None
        if exc.errno == getattr(os, "ENXIO", 6):
            raise HomeError(f"{path} is not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        _check_file(path, info, mode)
        if mode != "read" and stat.S_IMODE(info.st_mode) & 0o077:
            # A file of ours that others may read (an older bir's, a copy) is ours alone from now on.
            os.fchmod(fd, 0o600)
        if mode == "write":
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_file(path: Path, info: os.stat_result, mode: Mode) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise HomeError(f"{path} is not a regular file; move it away and bir makes its own")
    problem = _owner_problem(path, info)
    if problem is not None:
        raise HomeError(problem)
    if mode != "read" and info.st_nlink > 1:
        raise HomeError(f"{path} has other names (hard links); bir writes only files of its own")


def read_private(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` (so a caller can tell a file over its limit).

    Raises:
        FileNotFoundError: it does not exist.
        HomeError, OSError: as for ``open_private``.
    """
    fd = open_private(path, "read")
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """Replace the content of ``path`` in place (a stamp, a small file no reader needs whole).

    Raises:
        HomeError, OSError: as for ``open_private``.
    """
    fd = open_private(path, "write")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
