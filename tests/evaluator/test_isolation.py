"""Nothing one evaluation does is visible to the next, on either engine.

Each case is a pair: a body that leaves something behind, then a body that looks for it. A pool
with one worker makes sure the second body runs where the first one did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bir.evaluator import EvaluatorPool, LogicError, walls

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def single(engine: str) -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=1, timeout_ms=2000, memory_mb=64, max_jobs=100_000, engine=engine) as one:
        if walls.all_up(walls.describe()):
            assert walls.all_up(one.walls), one.walls
        yield one


CASES = [
    ("a global it creates", "leaked = 1; return {}", "return {v: typeof leaked}", {"v": "undefined"}),
    ("a global it overwrites", "JSON = null; return {}", "return {v: typeof JSON.parse}", {"v": "function"}),
    ("a global it deletes", "delete globalThis.Math; return {}", "return {v: typeof Math}", {"v": "object"}),
    (
        "a polluted Object.prototype",
        "Object.prototype.polluted = 'yes'; return {}",
        "return {v: ({}).polluted === undefined}",
        {"v": True},
    ),
    (
        "a replaced Array method",
        "Array.prototype.map = function () { return ['evil'] }; return {}",
        "return {v: [1, 2].map(x => x * 2)}",
        {"v": [2, 4]},
    ),
    (
        "a property added to Array.prototype",
        "Array.prototype.extra = 1; return {}",
        "const keys = []; for (const k in [1]) keys.push(k); return {v: keys}",
        {"v": ["0"]},
    ),
    (
        "a changed String method",
        "String.prototype.trim = () => 'evil'; return {}",
        "return {v: ' a '.trim()}",
        {"v": "a"},
    ),
    (
        "a replaced JSON.parse",
        "try { JSON.parse = () => ({evil: true}) } catch (e) {} return {}",
        "return {v: JSON.parse('{\"a\":1}')}",
        {"v": {"a": 1}},
    ),
    (
        "a changed Math.random",
        "try { Math.random = () => 4 } catch (e) {} return {}",
        "return {v: Math.random() < 1}",
        {"v": True},
    ),
    (
        "a replaced array iterator",
        "Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({done: true}); return {}",
        "let n = 0; for (const x of [1, 2, 3]) n += x; return {v: n}",
        {"v": 6},
    ),
    (
        "a state hung on its own function object",
        "arguments.callee.count = (arguments.callee.count || 0) + 1; return {}",
        "return {v: 'same body, fresh closure'}",
        {"v": "same body, fresh closure"},
    ),
    (
        "a regular expression's last match",
        "/(secret)/.exec('the secret'); return {}",
        "return {v: typeof RegExp.$1 === 'undefined' || RegExp.$1 === ''}",
        {"v": True},
    ),
    (
        "a change made by a promise callback after it returned",
        "Promise.resolve().then(() => { globalThis.late = 1; Array.prototype.late = 1 }); return {}",
        "return {v: typeof late, a: typeof [].late}",
        {"v": "undefined", "a": "undefined"},
    ),
    (
        "an accessor put in place of a method",
        "Object.defineProperty(Array.prototype, 'map', {get() { return () => ['evil'] }, configurable: true});"
        " return {}",
        "return {v: [1].map(x => x + 1)}",
        {"v": [2]},
    ),
    (
        "a method made enumerable",
        "Reflect.defineProperty(String.prototype, 'trim', {enumerable: true}); return {}",
        "const keys = []; for (const k in 'ab') keys.push(k); return {v: keys}",
        {"v": ["0", "1"]},
    ),
    (
        "a getter defined the legacy way",
        "Object.prototype.__defineGetter__('sneaky', () => 1); return {}",
        "return {v: 'sneaky' in {}}",
        {"v": False},
    ),
    (
        "a method made read-only",
        "Object.defineProperty(Array.prototype, 'push', {writable: false}); return {}",
        "const a = []; Array.prototype.push = function () { return 7 }; return {v: a.push(1)}",
        {"v": 7},
    ),
    (
        "an error name changed on Error.prototype",
        "Error.prototype.name = 'Hacked'; return {}",
        "return {v: new TypeError('x').name + '/' + new Error('y').name}",
        {"v": "TypeError/Error"},
    ),
]


@pytest.mark.parametrize(("what", "first", "second", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_nothing_a_body_leaves_behind_reaches_the_next_one(
    single: EvaluatorPool, what: str, first: str, second: str, expected: dict[str, object]
) -> None:
    await single.evaluate("paramsLogic", first, {})
    assert await single.evaluate("paramsLogic", second, {}) == expected


async def test_the_same_body_sees_a_fresh_function_object_each_call(single: EvaluatorPool) -> None:
    body = "arguments.callee.n = (arguments.callee.n || 0) + 1; return {n: arguments.callee.n}"
    assert await single.evaluate("paramsLogic", body, {}) == {"n": 1}
    assert await single.evaluate("paramsLogic", body, {}) == {"n": 1}


async def test_assignments_that_shadow_built_in_names_still_work(single: EvaluatorPool) -> None:
    body = (
        "const e = new Error('m'); e.name = 'ValidationError';"
        " const o = {}; o.toString = () => 'custom'; o.constructor = 'c';"
        " const counts = {}; for (const w of ['valueOf', 'a', 'a']) counts[w] = (counts[w] | 0) + 1;"
        " return {n: e.name, s: String(o), c: o.constructor, counts}"
    )
    assert await single.evaluate("paramsLogic", body, {}) == {
        "n": "ValidationError",
        "s": "custom",
        "c": "c",
        "counts": {"valueOf": 1, "a": 2},
    }


async def test_a_body_that_locks_an_intrinsic_retires_its_worker_and_the_next_body_is_clean(
    engine: str,
) -> None:
    async with EvaluatorPool(workers=1, timeout_ms=2000, memory_mb=64, engine=engine) as one:
        lock = "Object.defineProperty(Array.prototype, 'locked', {value: 1, configurable: false}); return {}"
        await one.evaluate("paramsLogic", lock, {})
        assert await one.evaluate("paramsLogic", "return {v: [].locked}", {}) == {}
        if engine == "v8":
            assert one.stats().retired >= 1


async def test_one_pool_serves_failing_and_passing_bodies_in_any_order(single: EvaluatorPool) -> None:
    for _ in range(3):
        with pytest.raises(LogicError):
            await single.evaluate("paramsLogic", "throw new Error('no')", {})
        assert await single.evaluate("paramsLogic", "return {ok: 1}", {}) == {"ok": 1}


async def test_a_job_queued_behind_a_body_that_taints_the_realm_runs_on_a_clean_worker() -> None:
    async with EvaluatorPool(workers=1, timeout_ms=2000, memory_mb=64) as one:
        lock = "Object.defineProperty(Object.prototype, 'stuck', {value: 1, configurable: false}); return {}"
        probe = "return {v: ({}).stuck === undefined}"
        # Both are queued at once: the probe must not be handed to the worker the first one tainted.
        answers = await asyncio.gather(
            one.evaluate("paramsLogic", lock, {}), *(one.evaluate("paramsLogic", probe, {}) for _ in range(5))
        )
        assert answers == [{}, *[{"v": True}] * 5]
        assert one.stats().retired >= 1
