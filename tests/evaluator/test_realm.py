"""The logic contract, as a body sees it, on both engines (logic-contract.md)."""

from __future__ import annotations

import pytest

from bir.evaluator import EvaluatorPool, LogicError

pytestmark = pytest.mark.anyio

MISSING = [
    "require",
    "process",
    "fetch",
    "console",
    "setTimeout",
    "setInterval",
    "clearTimeout",
    "queueMicrotask",
    "Buffer",
    "WebAssembly",
    "SharedArrayBuffer",
    "ArrayBuffer",
    "DataView",
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "Float32Array",
    "Float64Array",
    "BigInt64Array",
    "BigUint64Array",
    "Atomics",
    "FinalizationRegistry",
    "WeakRef",
    "dukpy",
    "Temporal",
    "performance",
    "DOMException",
    "call_python",
    "InternalError",
]
# Properties engines add to the intrinsics, which the allowlist takes out (allowlist.py).
MISSING_PROPERTIES = [
    "Error.captureStackTrace",
    "Error.prepareStackTrace",
    "Intl.v8BreakIterator",
    "Date.prototype.toTemporalInstant",
    "Function.prototype.fileName",
    "Function.prototype.lineNumber",
    "RegExp.lastMatch",
]


async def test_the_contract_example_returns_the_riskiest_device(pool: EvaluatorPool) -> None:
    body = (
        "const r = JSON.parse(toolOutput); const rows = JSON.parse(r.content[0].text);"
        " rows.sort((a, b) => b.risk - a.risk); return { highestRiskDeviceId: rows[0].id };"
    )
    output = (
        '{"content":[{"type":"text","text":"[{\\"id\\":\\"d1\\",\\"risk\\":3},{\\"id\\":\\"d2\\",\\"risk\\":9}]"}]}'
    )
    assert await pool.evaluate("toolOutputLogic", body, output, {}, {}) == {"highestRiskDeviceId": "d2"}


async def test_each_kind_receives_its_parameters_in_the_contract_order(pool: EvaluatorPool) -> None:
    assert await pool.evaluate("paramsLogic", "return {p: params.a}", {"a": 1}) == {"p": 1}
    assert await pool.evaluate("toolInputLogic", "return {p: params.a, r: respParams.b}", {"a": 1}, {"b": 2}) == {
        "p": 1,
        "r": 2,
    }
    out = await pool.evaluate(
        "toolOutputLogic", "return {t: typeof toolOutput, p: params.a, r: respParams.b}", "x", {"a": 1}, {"b": 2}
    )
    assert out == {"t": "string", "p": 1, "r": 2}
    assert await pool.evaluate("responseParamsLogic", "return {...respParams, p: params.a}", {"a": 1}, {"b": 2}) == {
        "b": 2,
        "p": 1,
    }


@pytest.mark.parametrize("name", MISSING)
async def test_a_capability_outside_the_contract_is_absent(pool: EvaluatorPool, name: str) -> None:
    assert await pool.evaluate("paramsLogic", f"return {{t: typeof {name}}}", {}) == {"t": "undefined"}


@pytest.mark.parametrize("path", MISSING_PROPERTIES)
async def test_a_property_an_engine_adds_of_its_own_is_absent(pool: EvaluatorPool, path: str) -> None:
    holder, _, name = path.rpartition(".")
    root = holder.split(".")[0]
    body = f"const h = typeof {root} === 'undefined' ? {{}} : {holder}; return {{own: Object.hasOwn(h, {name!r})}}"
    assert await pool.evaluate("paramsLogic", body, {}) == {"own": False}


async def test_array_from_async_answers_a_promise_and_is_no_constructor(pool: EvaluatorPool) -> None:
    # It used to overflow the stack in the V8 realm: its wrapper called itself (issue 16).
    body = (
        "const p = Array.fromAsync([1, Promise.resolve(2)]); const bad = Array.fromAsync(null);"
        " bad.catch(() => {}); let constructs = true; try { new Array.fromAsync([]) } catch (e) { constructs = false }"
        " return {promise: p instanceof Promise, rejected: bad instanceof Promise, constructs,"
        " name: Array.fromAsync.name, length: Array.fromAsync.length, own: Object.hasOwn(Array.fromAsync, 'prototype')}"
    )
    assert await pool.evaluate("paramsLogic", body, {}) == {
        "promise": True,
        "rejected": True,
        "constructs": False,
        "name": "fromAsync",
        "length": 1,
        "own": False,
    }


async def test_symbol_for_and_key_for_are_absent(pool: EvaluatorPool) -> None:
    out = await pool.evaluate("paramsLogic", "return {f: typeof Symbol.for, k: typeof Symbol.keyFor}", {})
    assert out == {"f": "undefined", "k": "undefined"}


@pytest.mark.parametrize(
    "expression",
    [
        "eval('1 + 1')",
        "new Function('return 1')()",
        "Function('return 1')()",
        "(function () {}).constructor('return 1')()",
        "(function* () {}).constructor('yield 1')",
        "(async function () {}).constructor('return 1')",
        "Reflect.construct(Object.getPrototypeOf(function () {}).constructor, ['return 1'])()",
    ],
)
async def test_every_way_of_compiling_a_string_throws(pool: EvaluatorPool, expression: str) -> None:
    body = f"try {{ {expression}; return {{compiled: true}} }} catch (e) {{ return {{error: String(e)}} }}"
    out = await pool.evaluate("paramsLogic", body, {})
    assert "compiled" not in out
    assert "EvalError" in out["error"] or "not a constructor" in out["error"] or "not a function" in out["error"]


async def test_javascripts_own_built_ins_are_there(pool: EvaluatorPool) -> None:
    body = (
        "return {m: Math.max(1, 2), j: JSON.stringify([1]), d: typeof Date.now(), r: /a(b)/.exec('ab')[1],"
        " s: [...new Set([1, 1, 2])].length, p: typeof Promise, b: typeof BigInt}"
    )
    out = await pool.evaluate("paramsLogic", body, {})
    assert out == {"m": 2, "j": "[1]", "d": "number", "r": "b", "s": 2, "p": "function", "b": "function"}


async def test_a_body_is_sloppy_unless_it_opens_with_use_strict(pool: EvaluatorPool) -> None:
    assert await pool.evaluate("paramsLogic", "undeclared = 1; return {v: undeclared}", {}) == {"v": 1}
    strict = '"use strict"; try { undeclared2 = 1; return {v: 1} } catch (e) { return {e: e.name} }'
    assert await pool.evaluate("paramsLogic", strict, {}) == {"e": "ReferenceError"}


async def test_a_body_mutating_its_arguments_changes_nothing_outside_the_call(pool: EvaluatorPool) -> None:
    params = {"list": [1, 2], "nested": {"a": 1}}
    await pool.evaluate("paramsLogic", "params.list.push(3); params.nested.a = 9; return {}", params)
    assert params == {"list": [1, 2], "nested": {"a": 1}}


async def test_keys_whose_values_do_not_serialize_disappear_as_under_json_stringify(pool: EvaluatorPool) -> None:
    out = await pool.evaluate("paramsLogic", "return {a: undefined, f() {}, b: 1, n: null}", {})
    assert out == {"b": 1, "n": None}


async def test_a_null_prototype_object_is_a_plain_object(pool: EvaluatorPool) -> None:
    assert await pool.evaluate("paramsLogic", "const o = Object.create(null); o.a = 1; return o", {}) == {"a": 1}


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("return null", "null"),
        ("return undefined", "undefined"),
        ("return 42", "a number"),
        ("return 'x'", "a string"),
        ("return [1, 2]", "an array"),
        ("return function () {}", "a function"),
        ("class Device {}; return new Device()", "an instance of Device"),
        ("return Promise.resolve({a: 1})", "a promise or thenable"),
        ("return {then(resolve) { resolve({}) }}", "a promise or thenable"),
        ("return (async () => ({a: 1}))()", "a promise or thenable"),
    ],
)
async def test_a_result_that_is_not_a_plain_object_is_refused(pool: EvaluatorPool, body: str, what: str) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("toolInputLogic", body, {}, {})
    assert caught.value.reason == "result"
    assert f"returned {what}" in caught.value.message


@pytest.mark.parametrize(
    "body",
    [
        "return {n: 1n}",
        "const o = {}; o.self = o; return o",
        "return {toJSON() { throw new Error('no') }}",
    ],
)
async def test_a_result_that_cannot_cross_as_json_is_the_bodys_error(pool: EvaluatorPool, body: str) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", body, {})
    assert caught.value.reason == "result"
    assert "cannot be serialized" in caught.value.message


async def test_a_thrown_error_comes_back_as_its_string(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("toolOutputLogic", "return {id: params.device.id}", "{}", {}, {})
    assert caught.value.reason == "threw"
    assert caught.value.message.startswith("TypeError")
    assert "id" in caught.value.message


async def test_a_200000_character_error_comes_back_in_at_most_1000(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", "throw new Error('x'.repeat(200000))", {})
    assert caught.value.reason == "threw"
    assert len(caught.value.message) <= 1000
    assert caught.value.message.startswith("Error: xxx")


async def test_a_thrown_value_whose_string_conversion_throws_is_still_reported(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", "throw {toString() { throw 1 }}", {})
    assert caught.value.reason == "threw"
    assert "cannot be shown" in caught.value.message


async def test_a_body_that_does_not_parse_is_a_compile_error(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", "return {", {})
    assert caught.value.reason == "compile"
    assert "SyntaxError" in caught.value.message
    assert "__bir_" not in caught.value.message


async def test_a_body_that_closes_its_function_early_is_refused(pool: EvaluatorPool) -> None:
    body = "return {} }; }); globalThis.escaped = 1; (function () { return function () {"
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", body, {})
    assert caught.value.reason == "compile"
    assert await pool.evaluate("paramsLogic", "return {e: typeof escaped}", {}) == {"e": "undefined"}


async def test_deep_recursion_throws_a_range_error_and_the_worker_serves_on(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", "function f(n) { return f(n + 1) + 1 }; return {v: f(0)}", {})
    assert caught.value.reason == "threw"
    assert "RangeError" in caught.value.message
    assert await pool.evaluate("paramsLogic", "return {ok: true}", {}) == {"ok": True}


async def test_a_large_tool_output_and_unicode_cross_intact(pool: EvaluatorPool) -> None:
    text = "é\u2028" + "x" * 2_000_000 + "€"
    out = await pool.evaluate(
        "toolOutputLogic", "return {n: toolOutput.length, h: toolOutput.slice(0, 2)}", text, {}, {}
    )
    assert out == {"n": len(text), "h": "é\u2028"}


async def test_a_huge_result_is_refused_with_a_bounded_message(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await pool.evaluate("paramsLogic", "return {s: 'x'.repeat(9 * 1024 * 1024)}", {})
    assert caught.value.reason == "result"
    assert "the limit is" in caught.value.message
    assert len(caught.value.message) <= 1000


async def test_a_proto_key_in_the_arguments_is_a_plain_key_not_a_prototype(pool: EvaluatorPool) -> None:
    body = (
        "return {own: Object.prototype.hasOwnProperty.call(params, '__proto__'),"
        " plain: Object.getPrototypeOf(params) === Object.prototype, polluted: ({}).x === 1}"
    )
    out = await pool.evaluate("paramsLogic", body, {"__proto__": {"x": 1}})
    assert out == {"own": True, "plain": True, "polluted": False}
