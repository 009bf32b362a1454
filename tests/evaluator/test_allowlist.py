"""The realm is built from an allowlist (``bir.evaluator.allowlist``), on every engine.

Each engine's global object is pinned name by name, and so is what the allowlist takes out of each
engine's own realm: an engine upgrade that adds a global or a property fails here, naming it, and
someone decides whether the contract allows it (then it goes into ``allowlist.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bir.evaluator import EvaluatorPool
from bir.evaluator.allowlist import FUNCTION_KEYS, GLOBALS, INTRINSICS
from bir.evaluator.realm import _anonymous_js

pytestmark = pytest.mark.anyio

CHILD_TIMEOUT_S = 60

STANDARD = [
    "AggregateError", "Array", "BigInt", "Boolean", "Date", "Error", "EvalError", "Function", "Infinity",
    "Iterator", "JSON", "Map", "Math", "NaN", "Number", "Object", "Promise", "Proxy", "RangeError",
    "ReferenceError", "Reflect", "RegExp", "Set", "String", "Symbol", "SyntaxError", "TypeError", "URIError",
    "WeakMap", "WeakSet", "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "eval",
    "globalThis", "isFinite", "isNaN", "parseFloat", "parseInt", "undefined", "unescape",
]  # fmt: skip
# What a body sees of the global object, per engine ("…-public": on its library's public API).
PINNED_GLOBALS = {
    "v8": sorted([*STANDARD, "AsyncDisposableStack", "DisposableStack", "Intl", "SuppressedError"]),
    "quickjs": sorted(STANDARD),
}
# mini-racer's public MiniRacer declares its setTimeout shim with `var`: those cannot be deleted, so
# they stay, emptied (undefined, read-only).
PUBLIC_V8_EMPTIED = ["__timer_manager", "clearTimeout", "setTimeout"]

_FORBIDDEN = [
    "ArrayBuffer", "Atomics", "BigInt64Array", "BigUint64Array", "DataView", "FinalizationRegistry",
    "Float16Array", "Float32Array", "Float64Array", "Int16Array", "Int32Array", "Int8Array", "SharedArrayBuffer",
    "Uint16Array", "Uint32Array", "Uint8Array", "Uint8ClampedArray", "WeakRef",
]  # fmt: skip
_LEGACY_REGEXP = [
    "RegExp.$&", "RegExp.$'", "RegExp.$+", "RegExp.$1", "RegExp.$2", "RegExp.$3", "RegExp.$4", "RegExp.$5",
    "RegExp.$6", "RegExp.$7", "RegExp.$8", "RegExp.$9", "RegExp.$_", "RegExp.$`", "RegExp.input",
    "RegExp.lastMatch", "RegExp.lastParen", "RegExp.leftContext", "RegExp.rightContext",
]  # fmt: skip
# What the allowlist takes out of each engine's realm, and why, per engine and surface.
PINNED_REMOVED = {
    "v8": sorted(
        [
            *_FORBIDDEN,
            *_LEGACY_REGEXP,
            "Symbol.for",
            "Symbol.keyFor",
            "Temporal",  # decided: see allowlist.py
            "Date.prototype.toTemporalInstant",
            "Error.captureStackTrace",  # V8's own
            "Intl.v8BreakIterator",  # V8's own
            "WebAssembly",
            "console",
        ]
    ),
    "quickjs": sorted(
        [
            *_FORBIDDEN,
            "Symbol.for",
            "Symbol.keyFor",
            "@@toStringTag",  # of the global object
            "DOMException",
            "Error.captureStackTrace",
            "Error.prepareStackTrace",
            "Function.prototype.columnNumber",
            "Function.prototype.fileName",
            "Function.prototype.lineNumber",
            "InternalError",
            "call_python",  # dukpy's
            "dukpy",  # dukpy's
            "performance",  # a sub-millisecond timer
            "queueMicrotask",
        ]
    ),
}
PINNED_REMOVED["v8-public"] = PINNED_REMOVED["v8"]
PINNED_REMOVED["quickjs-public"] = sorted(
    [
        *PINNED_REMOVED["quickjs"],
        # dukpy's JSInterpreter: its Node-like module loader, logger and process shim.
        "_dukpy_cjs_source_compiles",
        "_dukpy_eval_cjs_source",
        "console",
        "process",
        "require",
    ]
)
PINNED_KEPT = {"v8": [], "quickjs": [], "v8-public": PUBLIC_V8_EMPTIED, "quickjs-public": []}


def _variant(engine: str) -> str:
    return f"{engine}-public" if os.environ.get("BIR_LOGIC_ENGINE_SURFACE") == "public" else engine


def _difference(what: str, got: list[str], pinned: list[str]) -> str:
    added = sorted(set(got) - set(pinned))
    gone = sorted(set(pinned) - set(got))
    return (
        f"{what} changed: now also {added}, no longer {gone}. An engine upgrade changed the realm: decide "
        "whether the contract allows each name (bir/evaluator/allowlist.py), then update this pin."
    )


async def test_each_engines_global_object_is_exactly_the_pinned_list(pool: EvaluatorPool, engine: str) -> None:
    variant = _variant(engine)
    pinned = sorted(PINNED_GLOBALS[engine] + (PUBLIC_V8_EMPTIED if variant == "v8-public" else []))
    body = "return {names: Reflect.ownKeys(globalThis).map(String).sort()}"
    names = (await pool.evaluate("paramsLogic", body, {}))["names"]
    assert names == pinned, _difference(f"the {variant} realm's global object", names, pinned)
    assert set(PINNED_GLOBALS[engine]) <= set(GLOBALS)


async def test_the_names_that_could_not_be_deleted_are_empty(pool: EvaluatorPool, engine: str) -> None:
    body = "return {values: params.names.map((n) => typeof globalThis[n])}"
    names = PINNED_KEPT[_variant(engine)]
    assert await pool.evaluate("paramsLogic", body, {"names": names}) == {"values": ["undefined"] * len(names)}


def _child(script: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-B", "-c", script], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("variant", sorted(PINNED_REMOVED))
def test_each_engine_loses_exactly_the_pinned_additions(variant: str) -> None:
    name, _, surface = variant.partition("-")
    answer = _child(
        "import json, os\n"
        "from bir.evaluator.worker import _make_engine\n"
        f"engine = _make_engine({name!r}, 64, {surface or 'auto'!r})\n"
        "print(json.dumps({'removed': engine.realm_removed, 'kept': engine.realm_kept}))\n"
        "os._exit(0)\n"
    )
    removed = sorted(map(str, answer["removed"]))  # type: ignore[call-overload]
    kept = sorted(map(str, answer["kept"]))  # type: ignore[call-overload]
    pinned_removed, pinned_kept = PINNED_REMOVED[variant], PINNED_KEPT[variant]
    assert removed == pinned_removed, _difference(f"what the {variant} realm loses", removed, pinned_removed)
    assert kept == pinned_kept, _difference(f"what the {variant} realm could only empty", kept, pinned_kept)


# Walks every intrinsic the allowlist names, as a body can: whatever is there beyond the list.
_SURVEY = (
    "const ANON = "
    + _anonymous_js()
    + ";\n"
    + r"""
const allowed = params.allowed, fnKeys = params.fnKeys, found = [];
const name = (k) => typeof k === "symbol" ? "@@" + String(k.description).replace(/^Symbol\./, "") : k;
const resolve = (path) => {
  let o = globalThis, rest = path === "globalThis" ? "" : path;
  if (path[0] === "%") {
    const end = path.indexOf("%", 1) + 1;
    try { o = ANON[path.slice(0, end)](); } catch (e) { return undefined; }
    rest = path.slice(end + 1);
  }
  for (const part of rest ? rest.split(".") : []) {
    if (o === undefined || o === null) return undefined;
    o = o[part.startsWith("@@") ? Symbol[part.slice(2)] : part];
  }
  return o;
};
const listed = new Map();
for (const path of Object.keys(allowed)) {
  const o = resolve(path);
  if ((typeof o === "object" && o !== null) || typeof o === "function") listed.set(o, path);
}
for (const [o, path] of listed) {
  for (const k of Reflect.ownKeys(o)) {
    const n = name(k);
    if (!allowed[path].includes(n)) { found.push(path + "." + n); continue; }
    const d = Object.getOwnPropertyDescriptor(o, k);
    for (const v of [d.value, d.get, d.set]) {
      if (listed.has(v) || v === null || (typeof v !== "object" && typeof v !== "function")) continue;
      if (typeof v !== "function") { found.push("an unlisted object at " + path + "." + n); continue; }
      for (const fk of Reflect.ownKeys(v)) if (!fnKeys.includes(name(fk))) found.push(path + "." + n + "." + name(fk));
    }
  }
}
return {found, listed: listed.size};
"""
)


async def test_no_intrinsic_a_body_can_reach_keeps_a_property_outside_the_allowlist(
    pool: EvaluatorPool, engine: str
) -> None:
    allowed = {path: list(names) for path, names in INTRINSICS.items()}
    out = await pool.evaluate("paramsLogic", _SURVEY, {"allowed": allowed, "fnKeys": list(FUNCTION_KEYS)})
    # The names mini-racer's public API declares with `var` stay, emptied (tested above).
    assert sorted(out["found"]) == [f"globalThis.{n}" for n in PINNED_KEPT[_variant(engine)]]
    assert out["listed"] > (90 if engine == "v8" else 50)


def test_the_allowlist_admits_nothing_the_contract_forbids_and_not_temporal() -> None:
    forbidden = {*_FORBIDDEN, "Temporal", "console", "WebAssembly", "performance", "DOMException", "call_python"}
    assert forbidden.isdisjoint(GLOBALS)
    assert not {"for", "keyFor"} & set(INTRINSICS["Symbol"])
    assert not {p for p in INTRINSICS if p.split(".")[0] in forbidden}
    assert "toTemporalInstant" not in INTRINSICS["Date.prototype"]
