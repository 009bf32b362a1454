"""The V8 engine of a worker: one mini-racer isolate, one engine round trip per job.

mini-racer's public ``MiniRacer.eval`` hops through an asyncio thread and installs ``setTimeout`` on
the global object; a worker needs neither. So this drives mini-racer's ``Context`` directly (the
version is pinned in pyproject.toml): the worker thread posts an eval to the isolate's thread and
waits on mini-racer's own result queue (a plain answer is sent from the isolate's thread, and the
worker thread dozes on its inbox meanwhile: ``answer_early``), with the time limit enforced by
cancelling the task (V8 ``TerminateExecution``). Work a body queued for later (promise callbacks) runs on the isolate's
thread right after the eval returns; ``settle`` runs behind it, so a runaway callback shows up as a
settle that does not finish, and the worker exits.

That private surface is an owned decision: ``PRIVATE_SURFACE`` names every piece of it,
``private_surface_gap`` checks them before a worker starts, and ``engine_v8_choice.make_v8_engine`` falls back to
mini-racer's public API (``engine_v8_public.PublicV8Engine``, slower) when one is missing, so that an
upgrade of mini-racer slows the worker down instead of breaking it. ``tests/evaluator/test_engine_surface.py``
fails, naming what moved, when it does.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import secrets
import select
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from bir.evaluator.engine import Outcome, Wedged, bounded, memory_message, timeout_message
from bir.evaluator.realm import factory_source, js_length, setup_script
from bir.evaluator.wire import Job

# How long a cancelled eval may take to come back before the isolate is declared wedged.
CANCEL_GRACE_S: Final = 0.25
MAX_DEFINED: Final = 1000

# Every private name of mini-racer the fast path relies on, as "module:name" or "module:Class.attribute".
# mr_eval's callback id 0 is the uncancelable task: its answer goes to the results queue we replace.
PRIVATE_SURFACE: Final = (
    "py_mini_racer._mini_racer:_make_context",
    "py_mini_racer._context:Context._python_to_value_handle",
    "py_mini_racer._context:Context._value_handle_to_python",
    "py_mini_racer._context:Context._non_cancelable_mr_task_results_queue",
    "py_mini_racer._context:Context._dll",
    "py_mini_racer._context:Context._ctx",
    "py_mini_racer._context:_UNCANCELABLE_TASK_CALLBACK_ID",
    "py_mini_racer._value_handle:ValueHandle.raw",
)
# The native calls made through Context._dll, with their argument counts.
PRIVATE_NATIVE: Final = {"mr_eval": 3, "mr_cancel_task": 2}
# What the walls use to reach the engine's threads (both engines; when it moved, Landlock is reported down).
WALLS_SURFACE: Final = (
    "py_mini_racer._context:Context.handle_callback_from_v8",
    "py_mini_racer._context:Context.event_loop",
)
THREAD_DEADLINE_S: Final = 5.0

_flags_applied = False


def init_v8(memory_mb: int) -> None:
    """Apply the workers' V8 flags, once per process, before any context exists."""
    global _flags_applied
    if _flags_applied:
        return
    from py_mini_racer import init_mini_racer

    # --single-threaded is mini-racer's default and must stay; the flags replace it. V8's own heap
    # ceiling sits well above our limit so that the hard limit (or the supervisor's RSS watch) acts
    # first, and a V8 fatal OOM stays a backstop.
    init_mini_racer(
        flags=(
            "--single-threaded",
            "--disallow-code-generation-from-strings",
            f"--max-old-space-size={max(256, memory_mb * 4 + 128)}",
        )
    )
    _flags_applied = True


def _private_name_present(spec: str) -> bool:
    import importlib

    module_name, _, path = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError:
        return False
    owner, _, attribute = path.partition(".")
    if not hasattr(target, owner):
        return False
    target = getattr(target, owner)
    if not attribute:
        return True
    if hasattr(target, attribute):
        return True
    # A dataclass field without a default is an annotation only.
    fields = getattr(target, "__dataclass_fields__", {})
    return attribute in fields


def private_surface_gap() -> str | None:
    """What of mini-racer's private surface (``PRIVATE_SURFACE``, ``PRIVATE_NATIVE``) is missing, or None.

    Loads mini-racer's library (with the workers' flags applied first, by the caller).
    """
    missing = [spec for spec in PRIVATE_SURFACE if not _private_name_present(spec)]
    if not missing:
        try:
            from py_mini_racer import _context

            if _context._UNCANCELABLE_TASK_CALLBACK_ID != 0:
                missing.append("py_mini_racer._context:_UNCANCELABLE_TASK_CALLBACK_ID == 0")
        except (ImportError, AttributeError):
            missing.append("py_mini_racer._context:_UNCANCELABLE_TASK_CALLBACK_ID")
    try:
        from py_mini_racer import init_mini_racer

        dll = init_mini_racer(ignore_duplicate_init=True)
        for native, arity in PRIVATE_NATIVE.items():
            argtypes = getattr(getattr(dll, native, None), "argtypes", None)
            if argtypes is None or len(argtypes) != arity:
                missing.append(f"libmini_racer:{native}/{arity}")
    except Exception as exc:  # noqa: BLE001 - whatever the library does, the answer is "missing"
        missing.append(f"libmini_racer ({type(exc).__name__})")
    if not missing:
        return None
    return "mini-racer's private surface moved: " + ", ".join(missing)


class V8Engine:
    name = "v8"
    # Why this engine runs on mini-racer's public API instead of its private surface, or None.
    fallback: str | None = None

    def __init__(self, memory_mb: int) -> None:
        init_v8(memory_mb)
        from py_mini_racer import JSEvalException, JSParseException, _mini_racer

        self._parse_error = JSParseException
        self._eval_error = JSEvalException

        self._memory_mb = memory_mb
        self._context_maker: AbstractContextManager[Any] = _mini_racer._make_context()
        self._ctx: Any = self._context_maker.__enter__()
        self._ctx.set_hard_memory_limit(memory_mb * 1024 * 1024)
        # mini-racer hands each answer to a queue.Queue from the isolate's thread; ours is _Handover,
        # which can also answer a job from that thread (see answer_early).
        self._queue = _Handover(self)
        object.__setattr__(self._ctx, "_non_cancelable_mr_task_results_queue", self._queue)
        self._early: Callable[[int, Outcome], None] | None = None
        self._armed: tuple[int, str] | None = None
        self._inbox_ready: Callable[[], bool] | None = None
        self._doze_poll: select.poll | None = None
        self.version = str(self._ctx.v8_version())
        self._set_up_realm()

    def _set_up_realm(self) -> None:
        """Strip and lock the realm (``realm.setup_script``) through this engine's ``_eval``.

        Raises:
            RuntimeError: the realm did not set up.
        """
        self._runner = "__bir_" + secrets.token_hex(16)
        self._defined: set[str] = set()
        self._syntax_may_queue: dict[str, bool] = {}
        status, value = self._eval(setup_script(self._runner), 30.0)
        if status != "ok":
            raise RuntimeError(f"the V8 realm did not set up: {value}")
        self.realm_stats = str(value)
        report = json.loads(self.realm_stats)
        # What the allowlist took out of the engine's realm (allowlist.py), and what it could only empty.
        self.realm_removed: list[str] = list(report["removed"])
        self.realm_kept: list[str] = list(report["kept"])

    def answer_early(
        self,
        send: Callable[[int, Outcome], None],
        *,
        inbox_fd: int | None = None,
        inbox_ready: Callable[[], bool] | None = None,
    ) -> None:
        """Let a job's plain answer be sent by ``send`` from the isolate's own thread, as soon as the
        engine call returns: the worker thread need not wake up first. A job whose answer must wait
        (work it queued, a realm to restore, a timeout) still comes back through ``run``.

        With ``inbox_fd`` (the descriptor the next job arrives on) and ``inbox_ready`` (whether a
        frame is already read and waiting), the worker thread waiting on such a job sleeps until the
        next job arrives, an answer that was not sent needs it, or the job's time is up: an answer
        sent from the isolate's thread does not wake it (one wake-up and one handover of the GIL
        less per job, at the moment the supervisor is being woken)."""
        self._early = send
        if inbox_fd is not None and inbox_ready is not None:
            self._inbox_ready = inbox_ready
            self._doze_poll = select.poll()
            self._doze_poll.register(inbox_fd, select.POLLIN)
            self._doze_poll.register(self._queue.bell, select.POLLIN)

    def _doze(self, timeout_s: float) -> None:
        """Sleep until the next frame arrives, the isolate's thread rings for the worker thread, or
        ``timeout_s`` passes. The answer itself is then taken from the queue, as without dozing."""
        poller = self._doze_poll
        if poller is None or self._inbox_ready is None or self._inbox_ready():
            return
        for fd, _ in poller.poll(max(math.ceil(timeout_s * 1000), 1)):
            if fd == self._queue.bell:
                self._queue.silence()

    def _plain_outcome_for(self, armed: tuple[int, str], value: object) -> Outcome | None:
        """The outcome of an armed job's answer when it needs nothing more, else None."""
        if not isinstance(value, str) or len(value) < 2 or value[1] != "-":
            return None
        tag, rest, kind = value[0], value[2:], armed[1]
        if tag == "O":
            return Outcome(ok=True, value=rest)
        if tag == "T":
            return Outcome(ok=False, reason="threw", message=bounded(rest))
        if tag == "R":
            return Outcome(ok=False, reason="result", message=bounded(f"{kind} {rest}"))
        return None

    # -- the one round trip ------------------------------------------------------------------------

    def _eval(self, code: str, timeout_s: float) -> tuple[str, object]:
        """("ok", value) | ("timeout", None) | ("memory", None) | ("compile", msg) | ("error", msg).

        Raises:
            Wedged: the isolate did not stop when cancelled.
        """
        ctx = self._ctx
        deadline = time.monotonic() + timeout_s
        handle = ctx._python_to_value_handle(code)  # kept alive until the answer arrives
        task = ctx._dll.mr_eval(ctx._ctx, handle.raw, 0)
        cancelled = False
        if self._armed is not None:
            self._doze(timeout_s)
        try:
            answer = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0005))
        except queue.Empty:
            cancelled = True
            ctx._dll.mr_cancel_task(ctx._ctx, task)
            try:
                answer = self._queue.get(timeout=CANCEL_GRACE_S)
            except queue.Empty:
                raise Wedged from None
        del handle
        if isinstance(answer, _Answered):
            return "answered", answer.outcome
        if isinstance(answer, _Converted):
            return "ok", answer.value
        try:
            return "ok", ctx._value_handle_to_python(answer)
        except self._parse_error as exc:
            return "compile", str(exc)
        except self._eval_error as exc:
            if ctx.was_hard_memory_limit_reached():
                return "memory", None
            if cancelled:
                return "timeout", None
            return "error", str(exc) or "the engine stopped the evaluation"

    # -- jobs --------------------------------------------------------------------------------------

    def run(self, job: Job) -> Outcome:
        key = job.key
        if not _is_key(key):
            return Outcome(ok=False, reason="compile", message="malformed job key")
        timeout_s = job.timeout_ms / 1000.0
        started = time.monotonic()
        # Work queued through syntax (async, import) is not flagged by the realm: no early answer then.
        early = self._early is not None and not _syntax_may_queue(job.body)
        for attempt in range(2):
            code = self._script(job, define=key not in self._defined or attempt > 0)
            self._armed = (job.id, job.kind) if early else None
            try:
                status, value = self._eval(code, timeout_s - (time.monotonic() - started))
            finally:
                self._armed = None
            if status == "answered":
                self._remember(key, job.body)
                assert isinstance(value, Outcome)
                return value
            if status == "timeout":
                # Stopped part-way: what it changed was not undone in the same call.
                return Outcome(
                    ok=False, reason="timeout", message=timeout_message(job.kind, job.timeout_ms), settle=True
                )
            if status == "memory":
                return Outcome(
                    ok=False,
                    reason="memory",
                    message=memory_message(job.kind, self._memory_mb),
                    retire="the isolate reached its memory limit",
                )
            if status == "compile":
                return Outcome(ok=False, reason="compile", message=bounded(_compile_message(job.kind, str(value))))
            if status == "error" or not isinstance(value, str) or not value:
                text = str(value).replace(self._runner, "runner")
                return Outcome(ok=False, reason="threw", message=bounded(text), settle=True)
            tag, flag, rest = value[0], value[1:2], value[2:]
            if tag == "M":
                self._defined.discard(key)
                continue
            if tag == "C":
                return Outcome(
                    ok=False,
                    reason="compile",
                    message=f"{job.kind} is not a function body: it closes the function early",
                    retire="a body closed its function early",
                )
            self._remember(key, job.body)
            settle = flag in ("q", "u") or self._syntax_may_queue[key]
            retire = "a body left the realm in a state that cannot be restored" if flag in ("t", "u") else None
            if tag == "O":
                return Outcome(ok=True, value=rest, settle=settle, retire=retire)
            if tag == "T":
                return Outcome(ok=False, reason="threw", message=bounded(rest), settle=settle, retire=retire)
            return Outcome(
                ok=False, reason="result", message=bounded(f"{job.kind} {rest}"), settle=settle, retire=retire
            )
        return Outcome(ok=False, reason="compile", message=f"{job.kind} could not be compiled")

    def _script(self, job: Job, *, define: bool) -> str:
        # The arguments cross as one JSON string literal that JSON.parse reads inside the call: a
        # literal object would treat a "__proto__" key as a prototype, JSON.parse as a plain key.
        run = f'{self._runner}.r("{job.key}", {_ENCODE(job.args).decode()})'
        if not define:
            return run
        factory = factory_source(job.kind, job.body)
        # A sloppy script, so a body is sloppy unless it opens with "use strict", as under new Function.
        return f'({self._runner}.d("{job.key}", {js_length(factory)}, {factory}) ? {run} : "C-")'

    def _remember(self, key: str, body: str) -> None:
        if len(self._defined) >= MAX_DEFINED:
            self._defined.clear()
            self._syntax_may_queue.clear()
            # The realm bounds its own cache the same way; keys it dropped answer "M" and are resent.
        self._defined.add(key)
        self._syntax_may_queue[key] = _syntax_may_queue(body)

    def settle(self, deadline: float) -> str:
        status, value = self._eval(f"{self._runner}.c()", deadline - time.monotonic())
        if status == "timeout":
            raise Wedged
        if status != "ok":
            return f"the realm could not be checked ({status})"
        if value:
            return str(value)
        return ""

    def _context(self) -> Any:
        return self._ctx

    def thread_runners(self) -> list[Callable[[Callable[[], None]], None]]:
        """Ways to run a function on each of the engine's own threads, for the walls (``walls.raise_walls``):
        the isolate's thread, from inside the callback that hands it an eval's answer, and mini-racer's
        event-loop thread, through its loop."""
        ctx = self._context()

        def on_isolate(work: Callable[[], None]) -> None:
            _on_isolate_thread(ctx, work, lambda: self._eval("0", THREAD_DEADLINE_S))

        def on_loop(work: Callable[[], None]) -> None:
            _on_loop_thread(ctx.event_loop, work)

        return [on_isolate, on_loop]

    def heap_used(self) -> int:
        stats = self._ctx.heap_stats()
        data = json.loads(stats) if isinstance(stats, str) else {}
        return int(data.get("used_heap_size", 0))

    def collect(self) -> None:
        self._ctx.low_memory_notification()


def _on_isolate_thread(ctx: Any, work: Callable[[], None], evaluate: Callable[[], object]) -> None:
    """Run ``work`` on the isolate's thread: mini-racer calls ``ctx.handle_callback_from_v8`` there with
    every answer, so for one eval that method runs ``work`` first.

    Raises:
        RuntimeError: the callback never ran.
    """
    original = ctx.handle_callback_from_v8
    ran = threading.Event()

    def first_work(callback_id: int, raw: object) -> None:
        if not ran.is_set():
            ran.set()
            work()
        original(callback_id, raw)

    object.__setattr__(ctx, "handle_callback_from_v8", first_work)
    try:
        evaluate()
    finally:
        object.__delattr__(ctx, "handle_callback_from_v8")
    if not ran.is_set():
        raise RuntimeError("the isolate's thread did not call back")


def _on_loop_thread(loop: Any, work: Callable[[], None]) -> None:
    """Run ``work`` on the thread of mini-racer's event loop and wait for it.

    Raises:
        RuntimeError: it did not run in time.
    """
    done = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    loop.call_soon_threadsafe(run)
    if not done.wait(THREAD_DEADLINE_S):
        raise RuntimeError("mini-racer's event-loop thread did not run")


def _syntax_may_queue(body: str) -> bool:
    # Promise machinery the realm cannot see being touched is syntax: async functions, await,
    # dynamic import. Syntax cannot be built from strings here, so the body's text tells.
    return "async" in body or "import" in body


@dataclass(frozen=True, slots=True)
class _Answered:
    """A job answer already sent from the isolate's thread."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class _Converted:
    """An answer already converted on the isolate's thread, for the worker thread to finish."""

    value: object


class _Handover:
    """Takes mini-racer's answers on the isolate's thread (holding the GIL, as mini-racer's own queue
    does) and hands them to the worker thread, sending an armed job's plain answer on the way.

    While the worker thread dozes on an armed job (``V8Engine._doze``), an answer it must handle
    itself also rings ``bell`` (an eventfd) to wake it; an answer already sent does not."""

    def __init__(self, engine: V8Engine) -> None:
        self._engine = engine
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def put(self, handle: object) -> None:
        engine = self._engine
        armed, send = engine._armed, engine._early
        if armed is None or send is None:
            self._queue.put(handle)
            return
        engine._armed = None
        try:
            value = engine._ctx._value_handle_to_python(handle)
        except Exception:  # noqa: BLE001 - an error answer is the worker thread's to read
            self._ring(handle)
            return
        outcome = engine._plain_outcome_for(armed, value)
        if outcome is None:
            self._ring(_Converted(value))
            return
        try:
            send(armed[0], outcome)
        except Exception:  # noqa: BLE001 - not sent: the worker thread sends it
            self._ring(_Converted(value))
            return
        self._queue.put(
            _Answered(
                Outcome(ok=outcome.ok, value=outcome.value, reason=outcome.reason, message=outcome.message, sent=True)
            )
        )

    def _ring(self, item: object) -> None:
        self._queue.put(item)
        os.eventfd_write(self.bell, 1)

    def silence(self) -> None:
        """Reset the bell (the worker thread woke up)."""
        with suppress(BlockingIOError):
            os.eventfd_read(self.bell)

    def get(self, timeout: float) -> object:
        return self._queue.get(timeout=timeout)


_PARSE_LOCATION = re.compile(r"^<anonymous>:(\d+): (.*)$")


def _compile_message(kind: str, raw: str) -> str:
    """mini-racer's parse error names our wrapper script and shows its line; say it of the body."""
    first = raw.split("\n", 1)[0]
    match = _PARSE_LOCATION.match(first)
    if match is None:
        return f"{kind} did not compile: SyntaxError"
    line = max(int(match.group(1)) - 1, 1)  # the body starts on the wrapper's second line
    return f"{kind} did not compile: {match.group(2)} (line {line} of the body)"


_KEY = re.compile(r"[0-9a-f]{32}")
_ENCODE = msgspec.json.Encoder().encode


def _is_key(key: str) -> bool:
    return _KEY.fullmatch(key) is not None
