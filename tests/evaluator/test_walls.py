"""The kernel's walls around a worker (``bir.evaluator.walls``), shown from an escaped body's place.

Each escape test runs a child process that builds an engine exactly as a worker does, applies the very
function the worker applies (``worker.wall_up``), and then does what a body that got out of the isolate
would: read the user's credentials, open a socket to loopback, run a shell, from the main thread and
from the engine's own threads. Nothing in the worker itself answers such requests. Where this kernel
lacks a layer, the tests that need it are skipped, and the degraded path is tested on its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bir.core import log
from bir.core.credentials import credentials_path
from bir.evaluator import EvaluatorPool, pool, walls

CHILD_TIMEOUT_S = 60
SECRET = "bir-test-secret-token-7f3a"
KERNEL = walls.probe()
needs_landlock = pytest.mark.skipif(KERNEL.landlock_abi < 4, reason=f"Landlock ABI 4+ needed: {KERNEL.landlock_why}")
needs_seccomp = pytest.mark.skipif(not KERNEL.seccomp, reason=f"seccomp needed: {KERNEL.seccomp_why}")

# What an escaped body tries; each attempt answers "ok" or the errno it failed with.
_ESCAPES = """
import errno, json, os, socket, subprocess, sys, threading

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def read_credentials():
    with open(CREDENTIALS) as f:
        leaked.append(f.read())

def tcp():
    with socket.create_connection(("127.0.0.1", PORT), timeout=2):
        pass

def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()

def write_file():
    open(os.path.join(HOME, "planted"), "w").close()

def escapes(exec_too=True):
    found = {
        "read_credentials": attempt(read_credentials),
        "list_home": attempt(lambda: os.listdir(HOME)),
        "tcp_loopback": attempt(tcp),
        "udp_socket": attempt(udp),
        "write_file": attempt(write_file),
        "spawn_shell": attempt(lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True)),
    }
    if exec_too:  # on success the shell replaces this process and prints "escaped" instead of the answer
        found["exec_shell"] = attempt(lambda: os.execv("/bin/sh", ["/bin/sh", "-c", "echo escaped"]))
    return found

leaked = []
"""


def _child(script: str, env_home: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", script],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
        env={"BIR_HOME": str(env_home)},
        cwd=env_home,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "escaped" not in done.stdout
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A BIR_HOME holding a credentials file, as ``bir login`` leaves it."""
    folder = tmp_path / "home"
    folder.mkdir()
    path = credentials_path(folder)
    path.write_text(json.dumps({"token": SECRET}))
    path.chmod(0o600)
    return folder


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on loopback; its port. It accepts what reaches it."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


def _prelude(home: Path, port: int) -> str:
    return f"HOME = {str(home)!r}\nCREDENTIALS = {str(credentials_path(home))!r}\nPORT = {port}\n" + _ESCAPES


@needs_landlock
@needs_seccomp
@pytest.mark.parametrize("variant", ["v8", "quickjs", "v8-public", "quickjs-public"])
def test_an_escaped_body_can_read_no_credentials_reach_no_socket_and_run_no_shell(
    variant: str, home: Path, listener: int
) -> None:
    name, _, surface = variant.partition("-")
    script = _prelude(home, listener) + textwrap.dedent(
        f"""
        from bir.evaluator.worker import _make_engine, wall_up
        before = escapes(exec_too=False)
        os.unlink(os.path.join(HOME, "planted"))
        leaked.clear()
        engine = _make_engine({name!r}, 64, {surface or "auto"!r})
        state = wall_up(engine)
        main = escapes()
        others = []
        for run_on in getattr(engine, "thread_runners", lambda: [])():
            found = {{}}
            run_on(lambda: found.update(escapes()))
            others.append(found)
        late = {{}}
        thread = threading.Thread(target=lambda: late.update(escapes()))
        thread.start()
        thread.join()
        print(json.dumps({{"before": before, "walls": state, "main": main, "engine_threads": others,
                          "new_thread": late, "leaked": leaked}}))
        sys.stdout.flush()
        os._exit(0)
        """
    )
    answer = _child(script, home)
    # The control: the same process, before the walls, can do each of these.
    assert answer["before"] == dict.fromkeys(
        ["read_credentials", "list_home", "tcp_loopback", "udp_socket", "write_file", "spawn_shell"], "ok"
    )
    walls_state = answer["walls"]
    assert isinstance(walls_state, dict)
    assert walls.all_up(walls_state), walls_state
    threads = answer["engine_threads"]
    assert isinstance(threads, list)
    assert len(threads) == (2 if name == "v8" else 0)
    for where in [answer["main"], answer["new_thread"], *threads]:
        assert isinstance(where, dict)
        assert where["read_credentials"] == "EACCES"  # Landlock: no file opens at all
        assert where["list_home"] == "EACCES"
        assert where["tcp_loopback"] == "EPERM"  # seccomp refuses the socket before Landlock sees a connect
        assert where["udp_socket"] == "EPERM"
        assert where["write_file"] == "EPERM"
        assert where["exec_shell"] == "EPERM"
        assert where["spawn_shell"] == "EPERM"
    assert answer["leaked"] == []
    assert not (home / "planted").exists()


def _one_layer(home: Path, port: int, *, landlock: bool, seccomp: bool) -> dict[str, object]:
    script = _prelude(home, port) + textwrap.dedent(
        f"""
        from bir.evaluator import walls
        state = walls.raise_walls(landlock={landlock}, seccomp={seccomp})
        print(json.dumps({{"walls": state, "escapes": escapes(), "leaked": leaked}}))
        sys.stdout.flush()
        os._exit(0)
        """
    )
    return _child(script, home)


@needs_landlock
def test_landlock_alone_stops_reading_connecting_and_running_but_not_a_udp_socket(home: Path, listener: int) -> None:
    answer = _one_layer(home, listener, landlock=True, seccomp=False)
    assert answer["escapes"] == {
        "read_credentials": "EACCES",
        "list_home": "EACCES",
        "tcp_loopback": "EACCES",
        "udp_socket": "ok",  # Landlock knows TCP only: seccomp refuses the socket itself
        "write_file": "EACCES",
        "spawn_shell": "EACCES",  # the fork works, the exec in the child does not
        "exec_shell": "EACCES",
    }
    assert answer["leaked"] == []


@needs_seccomp
def test_seccomp_alone_stops_sockets_writes_and_programs_but_not_reading(home: Path, listener: int) -> None:
    answer = _one_layer(home, listener, landlock=False, seccomp=True)
    assert answer["escapes"] == {
        "read_credentials": "ok",  # what stops this is Landlock
        "list_home": "ok",
        "tcp_loopback": "EPERM",
        "udp_socket": "EPERM",
        "write_file": "EPERM",
        "spawn_shell": "EPERM",
        "exec_shell": "EPERM",
    }
    assert answer["leaked"] == [json.dumps({"token": SECRET})]


def test_a_kernel_without_landlock_or_seccomp_leaves_those_walls_down_and_fails_nothing(home: Path) -> None:
    script = textwrap.dedent(
        """
        import json, os, sys
        from bir.evaluator import walls
        from bir.evaluator.wire import Job
        from bir.evaluator.worker import _make_engine
        bare = walls.Kernel(0, "this kernel has no Landlock", False, "this kernel has no seccomp", None)
        engine = _make_engine("v8", 64, "auto")
        state = walls.raise_walls(engine.thread_runners(), kernel=bare)
        outcome = engine.run(Job(id=1, kind="paramsLogic", key="1" * 32, body="return {a: 1}", args="[{}]",
                                 timeout_ms=2000))
        nnp = [line for t in os.listdir("/proc/self/task") for line in open(f"/proc/self/task/{t}/status")
               if line.startswith("NoNewPrivs")]
        print(json.dumps({"walls": state, "described": walls.describe(kernel=bare), "value": outcome.value,
                          "no_new_privs": nnp}))
        sys.stdout.flush()
        os._exit(0)
        """
    )
    answer = _child(script, home)
    expected = {
        "no_new_privs": "up",
        "landlock": "down: this kernel has no Landlock",
        "seccomp": "down: this kernel has no seccomp",
    }
    assert answer["walls"] == expected
    assert answer["described"] == expected
    assert answer["value"] == '{"a":1}'
    # no_new_privs is set on each of the engine's threads, as it is where Landlock goes up.
    assert answer["no_new_privs"] == ["NoNewPrivs:\t1\n"] * 3


def test_describe_says_which_walls_a_worker_here_puts_up_and_when_they_are_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described = walls.describe()
    assert set(described) == {"no_new_privs", "landlock", "seccomp"}
    assert described["landlock"].startswith("up: ABI" if KERNEL.landlock_abi else "down: ")
    assert described["seccomp"].startswith("up: " if KERNEL.seccomp else "down: ")
    assert walls.describe(enabled=False) == dict.fromkeys(described, "off: BIR_LOGIC_WALLS=0")
    monkeypatch.setenv("BIR_LOGIC_WALLS", "0")
    assert walls.describe() == walls.describe(enabled=False)
    assert not walls.all_up(walls.describe())


def _status(pid: int) -> list[dict[str, str]]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
            found.append({k: v.strip() for k, v in fields.items()})
    return found


@needs_landlock
@needs_seccomp
@pytest.mark.anyio
async def test_every_thread_of_every_worker_runs_filtered_and_without_new_privileges() -> None:
    async with EvaluatorPool(workers=2, engine="v8") as evaluator:
        assert walls.all_up(evaluator.walls), evaluator.walls
        assert await evaluator.evaluate("paramsLogic", "return {ok: 1}", {}) == {"ok": 1}
        pids = [c.pid for c in psutil.Process().children() if "bir.evaluator.worker" in " ".join(c.cmdline())]
        assert len(pids) >= 4  # two workers and their two warm spares
        for pid in pids:
            threads = _status(pid)
            assert len(threads) == 3  # the main thread, the isolate's, mini-racer's event loop
            for status in threads:
                assert status["Seccomp"] == "2"
                assert status["Seccomp_filters"] == "1"
                assert status["NoNewPrivs"] == "1"


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    monkeypatch.setattr(pool, "_walls_logged", set())
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield stream
    finally:
        log.set_stream(None)


@pytest.mark.anyio
async def test_a_pool_without_its_walls_says_so_once_and_serves(
    log_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_LOGIC_WALLS", "0")
    async with EvaluatorPool(workers=2, engine="quickjs") as evaluator:
        assert await evaluator.evaluate("paramsLogic", "return {ok: 1}", {}) == {"ok": 1}
        assert not walls.all_up(evaluator.walls)
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.strip()]
    (down,) = [line for line in lines if line["event"] == "evaluator.walls_down"]
    assert down["walls"] == dict.fromkeys(
        ["no_new_privs", "landlock", "seccomp"], "off: --walls off (BIR_LOGIC_WALLS=0)"
    )


def _header_numbers(path: Path) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", path.read_text())}


@pytest.mark.parametrize(
    ("arch", "header"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_the_filters_syscall_numbers_are_the_kernel_headers(arch: str, header: str) -> None:
    if not Path(header).exists():
        pytest.skip(f"{header} is not installed")
    known = _header_numbers(Path(header))
    numbers = walls.ARCHES[arch].numbers
    wrong = {name: (n, known[name]) for name, n in numbers.items() if name in known and known[name] != n}
    assert wrong == {}
    # Each refused name this architecture has is in its table (a header older than a call may lack it).
    assert [name for name in walls.REFUSED if name in known and name not in numbers] == []


@pytest.mark.parametrize("arch", sorted(walls.ARCHES))
def test_the_filter_assembles_for_each_architecture_with_its_pid(arch: str) -> None:
    program = walls.seccomp_program(walls.ARCHES[arch], 4242)
    assert len(program) % 8 == 0
    assert len(program) // 8 < 255
    assert (4242).to_bytes(4, "little") in program
