"""The V8 engine on mini-racer's public API only: the fallback of ``engine_v8_choice.make_v8_engine``.

Same realm, same runner, same outcomes as ``V8Engine`` (it is one, with another round trip): each
eval is ``MiniRacer.eval(code, timeout_sec=…)``, which hops through mini-racer's asyncio thread and
cancels the task (V8 ``TerminateExecution``) at the limit. No answer leaves early from the isolate's
thread, and a cancelled eval is followed by a probe eval so that an isolate that did not stop is
still reported as wedged.

``MiniRacer()`` installs its own ``setTimeout`` with ``var`` declarations, which the realm cannot
delete, and a ``__TimerManager`` class whose script-scope binding it cannot reach: before the realm
is set up, those globals are pinned to ``undefined`` and the class binding is emptied, and every
eval empties it again, so nothing a body hangs there outlives its job.
"""

from __future__ import annotations

import json
from typing import Any, Final

from bir.evaluator.engine import Wedged, bounded
from bir.evaluator.engine_v8 import CANCEL_GRACE_S, V8Engine, init_v8

# mini-racer's setTimeout shim (py_mini_racer._set_timeout): pinned, not deletable (`var`).
_TIMER_GLOBALS: Final = ("setTimeout", "clearTimeout", "__timer_manager")
_TIMER_CLASS: Final = "__TimerManager"
# Empties the class binding (assignable from outside the class); on the script's first line, so that
# a parse error's line number stays the wrapper's.
_RESET: Final = f"{_TIMER_CLASS} = undefined; "
_PIN: Final = (
    "(function () { const G = globalThis; for (const name of "
    + json.dumps(list(_TIMER_GLOBALS))
    + ") { if (Object.getOwnPropertyDescriptor(G, name) !== undefined) {"
    " if (!Reflect.deleteProperty(G, name)) Object.defineProperty(G, name, { value: undefined, writable: false });"
    " } } return 0; })()"
)


class PublicV8Engine(V8Engine):
    """``V8Engine`` on ``py_mini_racer.MiniRacer``'s public methods; ``fallback`` says why it runs."""

    def __init__(self, memory_mb: int, why: str) -> None:
        init_v8(memory_mb)
        from py_mini_racer import JSEvalException, JSParseException, JSTimeoutException, MiniRacer

        self._parse_error = JSParseException
        self._eval_error = JSEvalException
        self._timeout_error = JSTimeoutException
        self.fallback = bounded(why, 500)
        self._memory_mb = memory_mb
        self._early = None
        self._armed = None
        self._mr: Any = MiniRacer()
        self._mr.set_hard_memory_limit(memory_mb * 1024 * 1024)
        self.version = f"{self._mr.v8_version} (mini-racer public API)"
        # Only a mini-racer that declares the class gets the reset: in one that does not, the
        # assignment would create a global.
        self._reset = _RESET if self._mr.eval(f"typeof {_TIMER_CLASS}") == "function" else ""
        status, value = self._eval(_PIN, 30.0)
        if status != "ok":
            raise RuntimeError(f"mini-racer's timer globals could not be pinned: {value}")
        self._set_up_realm()

    def answer_early(self, send: object, **_: object) -> None:
        """The public API has no hook on the isolate's thread: every answer goes through ``run``."""

    def _eval(self, code: str, timeout_s: float) -> tuple[str, object]:
        """As ``V8Engine._eval``, through ``MiniRacer.eval``.

        Raises:
            Wedged: the isolate did not stop when cancelled.
        """
        mr = self._mr
        try:
            return "ok", mr.eval(self._reset + code, timeout_sec=max(timeout_s, 0.0005))
        except self._timeout_error:
            # mini-racer cancelled the task; an isolate that is still busy does not answer the probe.
            try:
                mr.eval("0", timeout_sec=CANCEL_GRACE_S)
            except self._timeout_error:
                raise Wedged from None
            except self._eval_error:
                pass
            if mr.was_hard_memory_limit_reached():
                return "memory", None
            return "timeout", None
        except self._parse_error as exc:
            return "compile", str(exc)
        except self._eval_error as exc:
            if mr.was_hard_memory_limit_reached():
                return "memory", None
            return "error", str(exc) or "the engine stopped the evaluation"

    def _context(self) -> Any:
        return self._mr._ctx

    def heap_used(self) -> int:
        stats = self._mr.heap_stats()
        return int(stats.get("used_heap_size", 0)) if isinstance(stats, dict) else 0

    def collect(self) -> None:
        self._mr.low_memory_notification()
