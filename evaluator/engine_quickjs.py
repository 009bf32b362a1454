"""The QuickJS engine of a worker (``BIR_LOGIC_ENGINE=quickjs``), on dukpy's embedded QuickJS-NG.

Every job gets a fresh QuickJS context (about a quarter of a millisecond), so nothing one job does
can reach the next and there is nothing to repair. QuickJS drains the jobs a body queues (promise
callbacks) inside the same call, so they run under the same limit. QuickJS has no time limit of its
own: its interrupt handler checks Python's signals, so a ``SIGALRM`` raised into Python stops the
script. Memory is QuickJS's fixed 128 MB and, as for V8, the supervisor's RSS watch.

It drives dukpy's native module ``dukpy._dukpy`` directly (``PRIVATE_SURFACE``): a bare context, with
no Python function reachable from JavaScript. When that surface moved, ``make_quickjs_engine`` falls
back to dukpy's public ``JSInterpreter`` (``PublicQuickJSEngine``), whose Node-like shims
(``require``, ``process``, ``call_python``, ...) the realm's allowlist removes with everything else
that is not the contract's.

The realm is stripped in full (``realm.setup_script``) in the first context; every later one is the
same build's same fresh context, so its setup deletes exactly what the first one's did.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import time
from types import FrameType
from typing import Any, Final

from bir.evaluator.engine import Outcome, bounded, memory_message, timeout_message
from bir.evaluator.realm import factory_source, js_length, setup_script
from bir.evaluator.wire import Job

QUICKJS_MEMORY_MB: Final = 128
# Every private name of dukpy this engine relies on ("module:name"); eval_string calls back into the
# host object it is given (_check_exported_function_exists, _call_python) and reads its _ctx.
PRIVATE_SURFACE: Final = (
    "dukpy._dukpy:create_context",
    "dukpy._dukpy:eval_string",
    "dukpy._dukpy:JSRuntimeError",
)
_LOCATION = re.compile(r"\n\s+at .*", re.DOTALL)
_DUKPY_GLOBALS: Final = "delete globalThis.dukpy; delete globalThis.call_python; "


class _Stopped(BaseException):
    """Raised from the SIGALRM handler into the running script (a BaseException: a body's own
    ``catch`` is JavaScript and cannot see it, and nothing on our side should swallow it)."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


class _Host:
    """dukpy's native eval calls back into this object only for exported Python functions: none."""

    def _check_exported_function_exists(self, name: bytes) -> bool:
        return False

    def _call_python(self, name: bytes, args: bytes) -> None:
        return None


def make_quickjs_engine(memory_mb: int, surface: str = "auto") -> QuickJSEngine:
    """The QuickJS engine of a worker: on dukpy's private native module, or on its public
    ``JSInterpreter`` when ``surface`` is "public" or that module moved (``engine.fallback`` says why)."""
    if surface == "public":
        return PublicQuickJSEngine(memory_mb, why="forced by BIR_LOGIC_ENGINE_SURFACE=public")
    try:
        return QuickJSEngine(memory_mb)
    except (ImportError, AttributeError, TypeError) as exc:
        why = f"dukpy's private surface moved: {type(exc).__name__}: {bounded(str(exc), 200)}"
    return PublicQuickJSEngine(memory_mb, why=why)


class QuickJSEngine:
    name = "quickjs"
    # Why this engine runs on dukpy's public API instead of its private surface, or None.
    fallback: str | None = None

    def __init__(self, memory_mb: int) -> None:
        from dukpy import _dukpy

        self._dukpy: Any = _dukpy
        self._js_error: type[Exception] = _dukpy.JSRuntimeError
        self._host = _Host()
        self._start(memory_mb)

    def _start(self, memory_mb: int) -> None:
        """Set up what every job's fresh context is built from, and build one.

        Raises:
            Exception: whatever the library raises when the realm cannot be built.
        """
        self._memory_mb = min(memory_mb, QUICKJS_MEMORY_MB)
        self._runner = "__bir_" + secrets.token_hex(16)
        self._setup = setup_script(self._runner, lock=False)
        self.version = "QuickJS-NG (dukpy)"
        signal.signal(signal.SIGALRM, _on_alarm)
        # Fail at start, not on the first job, if the realm cannot be built.
        report = json.loads(str(self._fresh()))
        self.realm_removed: list[str] = list(report["removed"])
        self.realm_kept: list[str] = list(report["kept"])
        self._setup = setup_script(self._runner, lock=False, known=self.realm_removed + self.realm_kept)
        self._fresh()

    def _fresh(self) -> object:
        """A new context with the realm set up: the one ``_call`` runs in. Answers the setup's report."""
        ctx = self._dukpy.create_context()
        self._host._ctx = ctx  # type: ignore[attr-defined]
        raw = self._dukpy.eval_string(self._host, self._setup.encode(), b"{}", False, "<realm>")
        return json.loads(raw.decode("utf-8")) if raw is not None else None

    def _call(self, script: str) -> object:
        """The value (decoded from JSON) of ``script`` in the fresh context."""
        raw = self._dukpy.eval_string(self._host, script.encode(), b"{}", False, "<logic>")
        return json.loads(raw.decode("utf-8")) if raw is not None else None

    def run(self, job: Job) -> Outcome:
        factory = factory_source(job.kind, job.body)
        run = f'{self._runner}.r("{job.key}", {json.dumps(job.args, ensure_ascii=False)})'
        # dukpy defines its `dukpy` and `call_python` globals afresh on every call; the body must not see them.
        script = f'{_DUKPY_GLOBALS}({self._runner}.d("{job.key}", {js_length(factory)}, {factory}) ? {run} : "C-")'
        started = time.monotonic()
        try:
            self._fresh()
            remaining = job.timeout_ms / 1000.0 - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 0.001))
            try:
                value = self._call(script)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Stopped:
            return Outcome(ok=False, reason="timeout", message=timeout_message(job.kind, job.timeout_ms))
        except self._js_error as exc:
            text = _LOCATION.sub("", str(exc)).replace(self._runner, "runner")
            if "out of memory" in text:
                return Outcome(ok=False, reason="memory", message=memory_message(job.kind, self._memory_mb))
            if text.startswith("SyntaxError"):
                return Outcome(ok=False, reason="compile", message=bounded(f"{job.kind} did not compile: {text}"))
            return Outcome(ok=False, reason="threw", message=bounded(text))
        if not isinstance(value, str) or not value:
            return Outcome(ok=False, reason="threw", message="the engine returned nothing")
        tag, rest = value[0], value[2:]
        if tag == "O":
            return Outcome(ok=True, value=rest)
        if tag == "T":
            if rest.startswith("InternalError: out of memory"):
                return Outcome(ok=False, reason="memory", message=memory_message(job.kind, self._memory_mb))
            return Outcome(ok=False, reason="threw", message=bounded(rest))
        if tag == "C":
            return Outcome(ok=False, reason="compile", message=f"{job.kind} is not a function body")
        return Outcome(ok=False, reason="result", message=bounded(f"{job.kind} {rest}"))

    def settle(self, deadline: float) -> str:
        # Each job had a context of its own, already dropped.
        return ""


class PublicQuickJSEngine(QuickJSEngine):
    """``QuickJSEngine`` on dukpy's public ``JSInterpreter``, one per job; ``fallback`` says why.

    Each ``JSInterpreter`` reads dukpy's runtime shims from its package: under the walls, that folder
    stays readable (``readable``)."""

    def __init__(self, memory_mb: int, why: str) -> None:
        import os

        import dukpy

        self.readable = (os.path.join(os.path.dirname(dukpy.__file__), "jsruntime"),)
        self._public: Any = dukpy
        self._js_error = dukpy.JSRuntimeError
        self._interpreter: Any = None
        self.fallback = bounded(why, 500)
        self._start(memory_mb)
        self.version = "QuickJS-NG (dukpy public API)"

    def _fresh(self) -> object:
        interpreter = self._public.JSInterpreter()
        report = interpreter.evaljs(self._setup)
        self._interpreter = interpreter
        return report

    def _call(self, script: str) -> object:
        # dukpy defines call_python afresh on every call, like its `dukpy` global; here it would reach
        # the interpreter's exported Python functions (its module loader), so it goes first.
        return self._interpreter.evaljs("delete globalThis.call_python; " + script)
