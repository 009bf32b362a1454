"""The worker's second wall: what the kernel refuses a worker once its engine is up.

The first wall is the engine's realm (``realm.py``) and the process around it (an empty environment,
an empty working folder, no core dumps, no file writes). This one is for the case where a body gets out
of the isolate and runs as the worker process: it is the kernel's, and the worker puts it up on itself,
after its engine is up and before its first job, with ``raise_walls``:

- **no_new_privs**: nothing the worker runs can gain privileges (and the two layers below need it);
- **Landlock** (ABI 1+; TCP from 4, scopes from 6): no file or folder can be opened at all (the
  descriptors it already holds keep working: its pipes, its ``/proc/self/statm``), no TCP bind or
  connect, no signal to and no abstract Unix socket of a process outside the worker. The kernel's ABI
  up to 7 restricts the calling thread only, so the worker applies it on each of its threads (the
  engine's own, through ``thread_runners``) and counts that it reached them all;
- **seccomp** (a classic BPF filter on every thread, ``SECCOMP_FILTER_FLAG_TSYNC``): refuses with
  ``EPERM`` what a logic body never needs: creating sockets, ``execve``, ``fork`` (a thread is still
  allowed), ``ptrace`` and other processes' memory, opening a file for writing, creating, renaming or
  removing files, mounts and namespaces, ``io_uring``, ``bpf``, keys, modules, and signals to any
  process but itself; everything else is allowed, because V8 needs its memory and thread calls (a
  default that denies would be a filter that kills V8 on its next ``madvise``).

Where the kernel lacks a layer, that layer is reported down and the others still go up: nothing fails.
``describe()`` says which walls a worker on this machine puts up (for ``bir doctor``); a worker's
``Hello`` says which it did put up. This is a small ``ctypes`` layer (``prctl``, ``syscall``) rather than
a dependency: Landlock is three syscalls, and PyPI's packages for it cover the filesystem only
(``landlock`` 1.0.0.dev5) or are a months-old beta (``landlockpy`` 0.2.0), neither sparing the
per-thread application; libseccomp's bindings (``pyseccomp``, last released in 2021) need a system
library pip cannot install, for a deny-list filter of a few dozen instructions per architecture.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

# A function that runs ``work`` on one of this process's threads and waits for it.
ThreadRunner = Callable[[Callable[[], None]], None]

UP: Final = "up"
PR_SET_NO_NEW_PRIVS: Final = 38
PR_GET_NO_NEW_PRIVS: Final = 39
PR_GET_SECCOMP: Final = 21
THREAD_DEADLINE_S: Final = 5.0

# --- Landlock (include/uapi/linux/landlock.h) ------------------------------------------------------------
_LANDLOCK_CREATE_RULESET: Final = 444
_LANDLOCK_ADD_RULE: Final = 445
_LANDLOCK_RESTRICT_SELF: Final = 446
_LANDLOCK_RULE_PATH_BENEATH: Final = 1
_FS_READ: Final = (1 << 2) | (1 << 3)  # READ_FILE, READ_DIR
_LANDLOCK_CREATE_RULESET_VERSION: Final = 1
# Filesystem rights each ABI handles: 1 has 13, 2 adds REFER, 3 TRUNCATE, 5 IOCTL_DEV.
_FS_RIGHTS_BY_ABI: Final = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_BIND_CONNECT_TCP: Final = 0b11  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET_AND_SIGNAL: Final = 0b11  # ABI 6

# --- seccomp (include/uapi/linux/seccomp.h, filter.h, audit.h) ---------------------------------------------
_SECCOMP_SET_MODE_FILTER: Final = 1
_SECCOMP_FILTER_FLAG_TSYNC: Final = 1
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_JGE_K: Final = 0x35
_JSET_K: Final = 0x45
_RET_K: Final = 0x06
_ARG_LOW: Final = (16, 24, 32, 40, 48, 56)  # offsetof(struct seccomp_data, args[i]), its low word
_X32_SYSCALL_BIT: Final = 0x40000000
# open(2) flags that write or create (the same on x86_64 and arm64): O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND.
_WRITE_FLAGS: Final = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000
_CLONE_THREAD: Final = 0x00010000
_TIOCSTI: Final = 0x5412
_TIOCLINUX: Final = 0x541C

# Refused outright, by name (a name an architecture lacks is skipped).
REFUSED: Final = (
    # the network
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    # running or reaching other programs
    "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "migrate_pages", "move_pages", "tkill",
    # changing files
    "creat", "open_by_handle_at", "name_to_handle_at", "truncate", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "rmdir", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "chmod",
    "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "mknod", "mknodat", "utime",
    "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
    "fremovexattr", "setxattrat", "removexattrat",
    # mounts, namespaces and the kernel's own surface
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "mount_setattr", "move_mount", "open_tree",
    "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct",
    "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm", "modify_ldt", "lookup_dcookie", "vhangup",
    "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "sethostname", "setdomainname", "uselib",
    "nfsservctl", "fanotify_init",
)  # fmt: skip
# Answered ENOSYS, so that the C library falls back to a call the filter can read (their arguments are a
# struct in memory): openat2 to openat, clone3 to clone.
UNSUPPORTED: Final = ("openat2", "clone3")


class Arch(NamedTuple):
    audit: int  # AUDIT_ARCH_*
    seccomp: int  # the seccomp syscall's number
    x32: bool  # whether numbers with __X32_SYSCALL_BIT are another ABI to refuse
    numbers: dict[str, int]


# Syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64).
# Numbers from 424 on are shared by every architecture.
_SHARED: Final = {
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "openat2": 437, "pidfd_getfd": 438, "process_madvise": 440,
    "mount_setattr": 442, "quotactl_fd": 443, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
    "open_tree_attr": 467,
}  # fmt: skip
# fmt: off
ARCHES: Final = {
    "x86_64": Arch(
        audit=0xC000003E,
        seccomp=317,
        x32=True,
        numbers=_SHARED
        | {
            "ioctl": 16, "open": 2, "openat": 257, "clone": 56, "kill": 62, "tgkill": 234, "tkill": 200,
            "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
            "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43, "accept4": 288,
            "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "ptrace": 101, "process_vm_readv": 310,
            "process_vm_writev": 311, "kcmp": 312, "migrate_pages": 256, "move_pages": 279,
            "creat": 85, "open_by_handle_at": 304, "name_to_handle_at": 303, "truncate": 76, "rename": 82,
            "renameat": 264, "renameat2": 316, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "link": 86, "linkat": 265,
            "unlink": 87, "unlinkat": 263, "symlink": 88, "symlinkat": 266, "chmod": 90, "fchmod": 91,
            "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "mknod": 133, "mknodat": 259,
            "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189,
            "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
            "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
            "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
            "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179,
            "syslog": 103, "iopl": 172, "ioperm": 173, "modify_ldt": 154, "lookup_dcookie": 212, "vhangup": 153,
            "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "sethostname": 170,
            "setdomainname": 171, "uselib": 134, "nfsservctl": 180, "fanotify_init": 300,
        },
    ),
    "aarch64": Arch(
        audit=0xC00000B7,
        seccomp=277,
        x32=False,
        numbers=_SHARED
        | {
            "ioctl": 29, "openat": 56, "clone": 220, "kill": 129, "tgkill": 131, "tkill": 130,
            "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
            "socket": 198, "socketpair": 199, "connect": 203, "bind": 200, "listen": 201, "accept": 202,
            "accept4": 242, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
            "process_vm_writev": 271, "kcmp": 272, "migrate_pages": 238, "move_pages": 239,
            "open_by_handle_at": 265, "name_to_handle_at": 264, "truncate": 45, "renameat": 38, "renameat2": 276,
            "mkdirat": 34, "linkat": 37, "unlinkat": 35, "symlinkat": 36, "fchmod": 52, "fchmodat": 53,
            "fchown": 55, "fchownat": 54, "mknodat": 33, "utimensat": 88, "setxattr": 5, "lsetxattr": 6,
            "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
            "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
            "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
            "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
            "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "quotactl": 60,
            "syslog": 116, "lookup_dcookie": 18, "vhangup": 58, "settimeofday": 170, "clock_settime": 112,
            "adjtimex": 171, "clock_adjtime": 266, "sethostname": 161, "setdomainname": 162, "nfsservctl": 42,
            "fanotify_init": 262,
        },
    ),
}
# fmt: on


class Kernel(NamedTuple):
    """What this kernel offers, probed without restricting anything."""

    landlock_abi: int  # 0: none (not built, not enabled, or refused)
    landlock_why: str  # why there is none
    seccomp: bool
    seccomp_why: str
    arch: Arch | None


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.prctl.restype = ctypes.c_int
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc = libc
    return _libc


def _syscall(number: int, *args: int | ctypes.c_void_p | ctypes.Array[ctypes.c_char]) -> tuple[int, int]:
    """(result, errno) of a raw syscall."""
    c = _c()
    ctypes.set_errno(0)
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = int(c.syscall(ctypes.c_long(number), *converted))
    return result, ctypes.get_errno()


def probe() -> Kernel:
    """What this kernel offers the walls. Changes nothing."""
    if not sys.platform.startswith("linux"):
        why = f"not Linux ({sys.platform})"
        return Kernel(0, why, False, why, None)
    arch = ARCHES.get(platform.machine())
    abi, landlock_why = 0, ""
    try:
        result, err = _syscall(_LANDLOCK_CREATE_RULESET, ctypes.c_void_p(None), 0, _LANDLOCK_CREATE_RULESET_VERSION)
    except (OSError, AttributeError) as exc:
        result, err = -1, 0
        landlock_why = f"no syscall(2) here ({type(exc).__name__})"
    if result > 0:
        abi = result
    elif not landlock_why:
        landlock_why = {
            errno.ENOSYS: "this kernel has no Landlock",
            errno.EOPNOTSUPP: "Landlock is built but not enabled (lsm= on the kernel's command line)",
        }.get(err, f"Landlock refused ({errno.errorcode.get(err, err)})")
    seccomp, seccomp_why = False, ""
    if arch is None:
        seccomp_why = f"no filter for this architecture ({platform.machine()})"
    else:
        try:
            c = _c()
            ctypes.set_errno(0)
            mode = c.prctl(PR_GET_SECCOMP, 0, 0, 0, 0)
            err = ctypes.get_errno()
        except (OSError, AttributeError) as exc:
            mode, err = -1, 0
            seccomp_why = f"no prctl(2) here ({type(exc).__name__})"
        if mode >= 0:
            seccomp = True
        elif not seccomp_why:
            seccomp_why = "this kernel has no seccomp" if err == errno.EINVAL else f"seccomp refused ({err})"
    return Kernel(abi, landlock_why, seccomp, seccomp_why, arch)


def describe(*, kernel: Kernel | None = None, enabled: bool | None = None) -> dict[str, str]:
    """Which walls an evaluator worker on this machine puts up, and why one would not: for ``bir doctor``.

    ``enabled`` defaults to ``BIR_LOGIC_WALLS`` as this process reads it now. Probes the kernel;
    restricts nothing.

    Raises:
        ConfigError: ``BIR_LOGIC_WALLS`` is malformed.
    """
    if enabled is None:
        from bir.core import config

        enabled = config.load().logic_walls
    if not enabled:
        off = "off: BIR_LOGIC_WALLS=0"
        return {"no_new_privs": off, "landlock": off, "seccomp": off}
    k = kernel if kernel is not None else probe()
    return {
        "no_new_privs": UP,
        "landlock": f"{UP}: {_landlock_scope(k.landlock_abi)}" if k.landlock_abi else f"down: {k.landlock_why}",
        "seccomp": f"{UP}: {_seccomp_scope()}" if k.seccomp else f"down: {k.seccomp_why}",
    }


def all_up(walls: dict[str, str]) -> bool:
    return bool(walls) and all(state == UP or state.startswith(UP + ":") for state in walls.values())


def _landlock_scope(abi: int) -> str:
    parts = ["no files"]
    if abi >= 4:
        parts.append("no TCP bind or connect")
    if abi >= 6:
        parts.append("no signals or abstract sockets outside the worker")
    return f"ABI {abi}: " + ", ".join(parts)


def _seccomp_scope() -> str:
    return "no sockets, exec, fork, ptrace, writing opens, file changes, mounts, io_uring, bpf, foreign signals"


# --- Landlock -------------------------------------------------------------------------------------------------


def _ruleset(abi: int, readable: Sequence[str] = ()) -> int:
    """A Landlock ruleset that handles every right ``abi`` knows and allows none but reading beneath
    ``readable`` (folders); its descriptor.

    Raises:
        OSError: the kernel refused it, or a folder cannot be opened.
    """
    fs = _FS_RIGHTS_BY_ABI[max(a for a in _FS_RIGHTS_BY_ABI if a <= abi)]
    fields = [fs]
    if abi >= 4:
        fields.append(_NET_BIND_CONNECT_TCP)
    if abi >= 6:
        fields.append(_SCOPE_ABSTRACT_UNIX_SOCKET_AND_SIGNAL)
    attr = ctypes.create_string_buffer(struct.pack(f"<{len(fields)}Q", *fields), 8 * len(fields))
    fd, err = _syscall(_LANDLOCK_CREATE_RULESET, attr, 8 * len(fields), 0)
    if fd < 0:
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for folder in readable:
            _allow_reading(fd, folder)
    except OSError:
        os.close(fd)
        raise
    return fd


def _allow_reading(ruleset: int, folder: str) -> None:
    """Raises: OSError: the folder cannot be opened, or the kernel refused the rule."""
    parent = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; } (packed)
        rule = ctypes.create_string_buffer(struct.pack("<Qi", _FS_READ, parent), 12)
        result, err = _syscall(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0)
    finally:
        os.close(parent)
    if result != 0:
        raise OSError(err, f"landlock_add_rule: {os.strerror(err)}")


def _no_new_privs() -> None:
    """Raises: OSError: prctl refused."""
    c = _c()
    ctypes.set_errno(0)
    if c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_NO_NEW_PRIVS: {os.strerror(err)}")


# --- seccomp --------------------------------------------------------------------------------------------------


class _Program:
    """A classic BPF program with forward jumps to labels, resolved at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def emit(self, op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((op, jt, jf, k & 0xFFFFFFFF))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        """Raises: ValueError: a jump goes backwards or further than 255 instructions."""
        out = bytearray()
        for pc, (op, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                offset = self.labels[target] - pc - 1 if isinstance(target, str) else target
                if not 0 <= offset <= 255:
                    raise ValueError(f"a jump of {offset} at {pc}")
                offsets.append(offset)
            out += struct.pack("<HBBI", op, offsets[0], offsets[1], k)
        return bytes(out)


def seccomp_program(arch: Arch, pid: int) -> bytes:
    """The filter: refuse ``REFUSED`` (EPERM), ``UNSUPPORTED`` (ENOSYS), opening for writing, a fork
    (a clone without ``CLONE_THREAD``), terminal injection ioctls, and signals to any process but ``pid``;
    allow the rest. A syscall of another ABI (i386 through ``int 0x80``, x32) is refused whole."""
    deny = _RET_ERRNO | errno.EPERM
    p = _Program()
    p.emit(_LD_W_ABS, 4)  # arch
    p.emit(_JEQ_K, arch.audit, 1, 0)
    p.emit(_RET_K, deny)
    p.emit(_LD_W_ABS, 0)  # nr
    if arch.x32:
        p.emit(_JGE_K, _X32_SYSCALL_BIT, "deny", 0)
    n = arch.numbers
    for name in REFUSED:
        if name in n:
            p.emit(_JEQ_K, n[name], "deny", 0)
    for name in UNSUPPORTED:
        p.emit(_JEQ_K, n[name], "enosys", 0)
    checks = [("openat", "open_flags_2"), ("clone", "clone_flags"), ("ioctl", "ioctl_request")]
    if "open" in n:
        checks.append(("open", "open_flags_1"))
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        checks.append((name, "own_pid"))
    for name, label in checks:
        p.emit(_JEQ_K, n[name], label, 0)
    p.emit(_RET_K, _RET_ALLOW)
    for label, arg in (("open_flags_1", 1), ("open_flags_2", 2)):
        p.label(label)
        p.emit(_LD_W_ABS, _ARG_LOW[arg])
        p.emit(_JSET_K, _WRITE_FLAGS, "deny", "allow")
    p.label("clone_flags")
    p.emit(_LD_W_ABS, _ARG_LOW[0])
    p.emit(_JSET_K, _CLONE_THREAD, "allow", "deny")
    p.label("ioctl_request")
    p.emit(_LD_W_ABS, _ARG_LOW[1])  # the kernel reads the request as 32 bits
    p.emit(_JEQ_K, _TIOCSTI, "deny", 0)
    p.emit(_JEQ_K, _TIOCLINUX, "deny", "allow")
    p.label("own_pid")
    p.emit(_LD_W_ABS, _ARG_LOW[0])  # a pid_t: 32 bits
    p.emit(_JEQ_K, pid, "allow", "deny")
    p.label("allow")
    p.emit(_RET_K, _RET_ALLOW)
    p.label("deny")
    p.emit(_RET_K, deny)
    p.label("enosys")
    p.emit(_RET_K, _RET_ERRNO | errno.ENOSYS)
    return p.assemble()


def _install_seccomp(arch: Arch) -> None:
    """The filter on every thread of this process.

    Raises:
        OSError: the kernel refused it (or a thread could not be synchronised).
    """
    code = seccomp_program(arch, os.getpid())
    filters = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }
    prog = ctypes.create_string_buffer(struct.pack("<HxxxxxxQ", len(code) // 8, ctypes.addressof(filters)), 16)
    result, err = _syscall(arch.seccomp, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, prog)
    if result > 0:
        raise OSError(errno.EAGAIN, f"seccomp: thread {result} could not take the filter")
    if result < 0:
        raise OSError(err, f"seccomp: {os.strerror(err)}")


# --- all of it ---------------------------------------------------------------------------------------------


def _threads() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def raise_walls(
    threads: Sequence[ThreadRunner] = (),
    *,
    readable: Sequence[str] = (),
    landlock: bool = True,
    seccomp: bool = True,
    kernel: Kernel | None = None,
) -> dict[str, str]:
    """Put the walls up on this process: ``no_new_privs`` and Landlock on the calling thread and on every
    thread ``threads`` reach (each runs a function there and waits), then the seccomp filter on all threads.
    ``readable``: folders whose files the engine still reads after this (read-only).

    Answers each wall's state, "up…" or "down: why" (``landlock``/``seccomp`` False: "off: …"). Never
    raises: a layer the kernel lacks, or refuses, is down and the others still go up. Once up, a wall
    cannot be taken down, and this process can no longer open any file: call it last.
    """
    k = kernel if kernel is not None else probe()
    state: dict[str, str] = {}
    ruleset: int | None = None
    why_not = ""
    if not landlock:
        why_not = "off: not asked"
    elif not k.landlock_abi:
        why_not = f"down: {k.landlock_why}"
    else:
        try:
            ruleset = _ruleset(k.landlock_abi, readable)
        except OSError as exc:
            why_not = f"down: {exc.strerror}"
    try:
        privs, walled = _on_every_thread(threads, ruleset)
    finally:
        if ruleset is not None:
            os.close(ruleset)
    state["no_new_privs"] = privs
    if ruleset is None:
        state["landlock"] = why_not
    elif walled:
        state["landlock"] = walled
    else:
        scope = _landlock_scope(k.landlock_abi)
        state["landlock"] = f"{UP}: {scope}" + (f" (but reading {', '.join(readable)})" if readable else "")
    if not seccomp:
        state["seccomp"] = "off: not asked"
    elif not k.seccomp or k.arch is None:
        state["seccomp"] = f"down: {k.seccomp_why}"
    elif state["no_new_privs"] != UP:
        state["seccomp"] = "down: no_new_privs is not set"
    else:
        try:
            _install_seccomp(k.arch)
            state["seccomp"] = f"{UP}: {_seccomp_scope()}"
        except (OSError, ValueError) as exc:
            state["seccomp"] = f"down: {exc}"
    return state


def _on_every_thread(threads: Sequence[ThreadRunner], ruleset: int | None) -> tuple[str, str]:
    """``no_new_privs``, and the Landlock ruleset when there is one, on the calling thread and on each thread
    ``threads`` reach; answers the states of both ("up", or "down: why"; "" for Landlock when it is up)."""
    present = _threads()
    reached: set[int] = set()
    privs_failed: list[str] = []
    landlock_failed: list[str] = []
    lock = threading.Lock()

    def here() -> None:
        try:
            _no_new_privs()
        except OSError as exc:
            with lock:
                privs_failed.append(str(exc.strerror))
            return
        if ruleset is not None:
            result, err = _syscall(_LANDLOCK_RESTRICT_SELF, ruleset, 0)
            if result != 0:
                with lock:
                    landlock_failed.append(f"landlock_restrict_self: {os.strerror(err)}")
                return
        with lock:
            reached.add(threading.get_native_id())

    unreached: list[str] = []
    for run_on in threads:
        try:
            run_on(here)
        except Exception as exc:  # noqa: BLE001 - a thread not reached is counted below
            unreached.append(f"{type(exc).__name__}: {exc}")
    here()  # the calling thread last: the runners above may still need what it could do
    missed = present - reached
    why = (unreached or [f"{len(missed)} of {len(present)} threads were not reached"])[0] if missed else ""
    privs = f"down: {privs_failed[0]}" if privs_failed else (f"down: {why}" if why else UP)
    walled = f"down: {landlock_failed[0]}" if landlock_failed else (f"down: {why}" if why else "")
    return privs, walled
