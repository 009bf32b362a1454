"""``bir-hook EVENT``: the command hook Claude Code runs for seven events.

It reads the hook JSON on stdin, finds the project's control server through its discovery file,
POSTs the body to the event's route with the bearer token and prints the answer. Whatever happens
(no server, a refused connection, a timeout, a bad answer, bad stdin, ``BIR_OFF=1``, ``bir off``) it prints one
JSON object, ``{}`` at worst, and exits 0: the host session must never fail because of bir.
Failures go to ``<BIR_HOME>/logs/hook.log``, never to stderr, which Claude Code may show the user.

A server that did not answer in time is remembered (``bir.core.stall``): until it runs again, hooks
answer ``{}`` at once instead of waiting out their deadline at every tool call.

When an installed project (not marked down) has no live server, the hook starts
``bir-hooks revive`` detached (``bir.core.revive``: at most once per ``REVIVE_EVERY_S``), and on SessionStart and
UserPromptSubmit waits up to ``REVIVE_WAIT_S`` for it, so that a session's first prompt is still
matched.

Only the standard library is on this module's import path (``bir.core.config``, ``bir.core.log``,
``bir.core.paths`` and ``bir.core.installed`` are standard-library only; a test holds them to it):
every tool call of a session pays for this process's start. On the path of an answered hook it imports
only ``config``, ``paths`` and ``http.client`` (without ``ssl``); ``installed`` (no server), the logger
(a failure) and ``subprocess`` (a revive) are imported where they are needed (``bir bench pin`` measures it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from bir.core import config
from bir.core.home_files import open_private, private_dir, read_private
from bir.core.host import host_pid
from bir.core.off_switch import runner_off
from bir.core.paths import discovery_file, pid_alive, resolve_project
from bir.core.stall import is_stalled, mark_stalled
from bir.hooks.hook_routes import HOOK_ROUTES, HOST_PID_FIELD

# Events that wait for a revived server: the start of a session and its prompts are what get matched.
WAITING_EVENTS: Final = frozenset({"SessionStart", "UserPromptSubmit"})

MAX_STDIN_BYTES: Final = 16 * 1024 * 1024
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
MAX_DISCOVERY_BYTES: Final = 64 * 1024
REVIVE_WAIT_S: Final = 1.0
REVIVE_POLL_S: Final = 0.04
LOG_MAX_BYTES: Final = 1024 * 1024
_EMPTY: Final = "{}"
USAGE: Final = (
    "usage: bir-hook EVENT  (EVENT: " + ", ".join(HOOK_ROUTES) + ")\n"
    "Claude Code's command hook: reads the hook JSON on stdin, prints the control server's answer or {}.\n"
)


class HookFailure(Exception):
    """Why a hook printed ``{}``; its message goes to the hook log."""


class ServerTimedOut(HookFailure):
    """The server took the connection and did not answer before the deadline."""


def _log(home: Path, **fields: Any) -> None:
    """One ``hook.failed`` line in ``<BIR_HOME>/logs/hook.log``, rotated past ~1 MB. Never raises."""
    try:
        from bir.core.log import format_event

        path = private_dir(home, "logs") / "hook.log"
        line = (format_event("hook.failed", fields) + "\n").encode("utf-8", "replace")
        try:
            if os.lstat(path).st_size + len(line) > LOG_MAX_BYTES:
                os.replace(path, path.with_name("hook.log.1"))
        except FileNotFoundError:
            pass
        fd = open_private(path, "append")
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - a hook that cannot log still answers
        return


def read_body(stream: Any, limit: int = MAX_STDIN_BYTES) -> tuple[bytes, dict[str, Any]]:
    """The raw hook body and its parsed object.

    Raises:
        HookFailure: more than ``limit`` bytes, not JSON, or not a JSON object.
    """
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise HookFailure(f"stdin is larger than {limit} bytes")
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise HookFailure(f"stdin is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise HookFailure("stdin is not a JSON object")
    return data, parsed


def with_host(body: bytes, parsed: Mapping[str, Any], host: int) -> bytes:
    """``body`` with bir's host field first in the object, the rest of its bytes as Claude Code wrote them
    (re-encoding a large ``tool_response`` would cost every tool call). An empty object stays as it is."""
    if not parsed or HOST_PID_FIELD in parsed:
        return body
    start = body.find(b"{")
    return body[:start] + b'{"' + HOST_PID_FIELD.encode() + b'":' + str(host).encode() + b"," + body[start + 1 :]


def project_dir(body: Mapping[str, Any], env: Mapping[str, str]) -> Path:
    """``CLAUDE_PROJECT_DIR``, else the hook's ``cwd``, else the working directory; resolved."""
    raw = env.get("CLAUDE_PROJECT_DIR") or body.get("cwd")
    if not isinstance(raw, str) or not raw:
        raw = os.getcwd()
    return resolve_project(raw)


def read_server(home: Path, project: Path) -> tuple[str, str, int] | None:
    """The live control server's ``(url, token, pid)``, or None (no file, unreadable, bad shape, dead pid)."""
    try:
        data = read_private(discovery_file(home, project), MAX_DISCOVERY_BYTES)
    except OSError:
        return None
    if len(data) > MAX_DISCOVERY_BYTES:
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    url, token, pid = raw.get("url"), raw.get("token"), raw.get("pid")
    if not (isinstance(url, str) and isinstance(token, str) and isinstance(pid, int)):
        return None
    return (url, token, pid) if pid_alive(pid) else None


def post(url: str, route: str, token: str, body: bytes, deadline: float) -> bytes:
    """POST ``body`` to ``url + route`` and return the answer's body, all before ``deadline`` (monotonic).

    Raises:
        ServerTimedOut: the server did not answer before ``deadline``.
        HookFailure: a bad URL, the connection failed, the answer was not 200 or too large.
    """
    # Imported here: a hook with no server to talk to never pays for them. The hook speaks plain HTTP
    # to a loopback server only (any other scheme is refused below), and importing `ssl` would cost
    # every tool call ~3 ms: a None in sys.modules makes http.client's optional `import ssl` fail as on
    # a Python built without it, and the entry goes again right after.
    blocked = "ssl" not in sys.modules and "http.client" not in sys.modules
    if blocked:
        sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import http.client
    finally:
        if blocked and sys.modules.get("ssl", False) is None:
            del sys.modules["ssl"]
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise HookFailure(f"discovery URL is not http: {url[:200]!r}")

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServerTimedOut(f"{route}: no answer before the deadline")
        return remaining

    path = (parts.path.rstrip("/") or "") + route
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=left())
    try:
        conn.request(
            "POST",
            path,
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        if conn.sock is not None:
            conn.sock.settimeout(left())
        response = conn.getresponse()
        chunks: list[bytes] = []
        size = 0
        while True:
            if conn.sock is not None:
                conn.sock.settimeout(left())
            chunk = response.read(64 * 1024)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise HookFailure("answer is too large")
            chunks.append(chunk)
        if response.status != 200:
            raise HookFailure(f"{route} answered {response.status}")
        return b"".join(chunks)
    except TimeoutError:
        raise ServerTimedOut(f"{route}: no answer before the deadline") from None
    except (OSError, http.client.HTTPException) as exc:
        raise HookFailure(f"{route}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def answer_text(data: bytes) -> str:
    """The answer as one compact JSON object.

    Raises:
        HookFailure: the answer is not a JSON object.
    """
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        raise HookFailure("answer is not JSON") from None
    if not isinstance(parsed, dict):
        raise HookFailure("answer is not a JSON object")
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))


def _wait_for_server(home: Path, project: Path, until: float) -> tuple[str, str, int] | None:
    while True:
        server = read_server(home, project)
        if server is not None or time.monotonic() >= until:
            return server
        time.sleep(REVIVE_POLL_S)


def run(argv: Sequence[str], stdin: Any, env: Mapping[str, str], home: Path) -> str:
    """The JSON object the hook prints for ``argv`` (its EVENT) and ``stdin``.

    Raises:
        HookFailure: why the answer is ``{}`` (the caller logs it).
    """
    start = time.monotonic()
    if len(argv) != 1 or argv[0] not in HOOK_ROUTES:
        raise HookFailure(f"unknown event {' '.join(argv)[:100]!r}")
    event = argv[0]
    route = HOOK_ROUTES[event]
    deadline = start + route.client_s
    body, parsed = read_body(stdin)
    project = project_dir(parsed, env)
    server = read_server(home, project)
    if server is None:
        from bir.core import installed
        from bir.core.revive import revive

        switches = installed.project(project, home)
        if switches is None or switches.down:
            return _EMPTY
        try:
            revive(home, project)
        except OSError as exc:
            raise HookFailure(f"revive failed: {exc}") from None
        if event not in WAITING_EVENTS:
            return _EMPTY
        server = _wait_for_server(home, project, min(deadline, time.monotonic() + REVIVE_WAIT_S))
        if server is None:
            raise HookFailure("no control server came up in time")
    url, token, pid = server
    if is_stalled(home, project, pid):
        return _EMPTY
    try:
        return answer_text(post(url, route.path, token, with_host(body, parsed, host_pid(env)), deadline))
    except ServerTimedOut:
        try:
            mark_stalled(home, project, pid)
        except OSError as exc:
            raise HookFailure(f"the server did not answer, and that could not be noted: {exc}") from None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """``bir-hook EVENT``: print the control server's answer, or ``{}``; always exit 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--help"], ["-h"]):
        # A person asking; Claude Code always passes an event.
        sys.stdout.write(USAGE)
        return 0
    out = _EMPTY
    home: Path | None = None
    try:
        home = config.home()
        # `bir off` (the off file) answers {} here too: no round trip, and no server revived for it.
        if not runner_off(config.off(), home):
            out = run(args, sys.stdin.buffer, os.environ, home)
    except Exception as exc:  # noqa: BLE001 - every failure becomes `{}` and a log line
        _log(home or Path("~/.baseinstrunner").expanduser(), hook=" ".join(args)[:100], error=str(exc)[:1000])
        out = _EMPTY
    try:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed stdout is Claude Code's business, not a reason to fail
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
