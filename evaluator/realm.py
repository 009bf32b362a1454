"""The JavaScript realm a logic body sees in the worker, and the runner that calls bodies.

``setup_script(runner)`` strips the global object and the intrinsics to the allowlist
(``allowlist.py``), locks the intrinsics, and binds the runner to a script-scope ``const`` whose name
is random per worker: script-scope bindings are invisible to reflection, and a body cannot name what
it cannot know. The runner is strict code (strict callers are censored from ``fn.caller``) that only
uses intrinsics captured before any body ran, called through a captured ``Reflect.apply``.

The contract's "a body sees JavaScript's own built-ins and nothing else" is read here, until
``logic-contract.md`` says it in these words, as: the built-ins of ECMA-262 (its current draft, every
finished proposal) and ECMA-402 (``Intl``, as V8 ships it), Annex B included, minus what the contract forbids, minus
``Temporal`` (decided: see ``allowlist.py``), minus the legacy ``RegExp`` statics, and nothing an engine
adds of its own. The realm deletes everything else and reports what it deleted; a name it cannot delete
(a ``var`` of mini-racer's public API) it empties.

Isolation between evaluations, without freezing everything: most intrinsics are frozen once; a small
*watched* set that V8 keeps fast paths for (freezing ``Array.prototype`` made array work about 4×
slower), or that ordinary code assigns through (``err.name = …`` on an Error), stays as it is and is
compared against a snapshot after every job, and repaired. What cannot be repaired (a property made
non-configurable, an object made non-extensible) taints the realm and the worker retires."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from bir.evaluator.allowlist import ANONYMOUS, FUNCTION_KEYS, INTRINSICS

MAX_MESSAGE_CHARS: Final = 1000
MAX_RESULT_CHARS: Final = 8 * 1024 * 1024

# Parameter names of each kind, in the contract's order (logic-contract.md).
PARAMETERS: Final = {
    "paramsLogic": "params",
    "toolInputLogic": "params, respParams",
    "toolOutputLogic": "toolOutput, params, respParams",
    "responseParamsLogic": "params, respParams",
}

_SETUP = r"""
const __RUNNER__ = (function () {
  "use strict";
  const G = globalThis;
  const apply = Reflect.apply;
  const ownKeys = Reflect.ownKeys;
  const getDesc = Object.getOwnPropertyDescriptor;
  const defineProp = Object.defineProperty;
  const deleteProp = Reflect.deleteProperty;
  const getProto = Object.getPrototypeOf;
  const setProto = Object.setPrototypeOf;
  const isExtensible = Object.isExtensible;
  const freeze = Object.freeze;
  const isArray = Array.isArray;
  const ObjectProto = Object.prototype;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const StringCtor = String;
  const strSlice = String.prototype.slice;
  const fnToString = Function.prototype.toString;
  const arrPush = Array.prototype.push;
  const LOCK = __LOCK__;
  const MAX_MESSAGE = __MAX_MESSAGE__;
  const MAX_RESULT = __MAX_RESULT__;

  // --- strip the realm to the allowlist (allowlist.py) -----------------------------------------
  // Every listed intrinsic is found first, then each loses what is not on its list: the globals
  // themselves are the list of globalThis. A built-in function keeps only FUNCTION_KEYS, and an
  // object a listed one holds that is not listed itself goes. What went is reported (stats()).
  // With KNOWN (what the same build's realm lost before), exactly that goes, and nothing is walked.
  const ANON = __ANONYMOUS__;
  const ALLOWED = __ALLOWED__;
  const KNOWN = __KNOWN__;
  const FUNCTION_KEYS = __FUNCTION_KEYS__;
  const removed = [];
  const kept = [];
  const keyOf = (name) => (name.indexOf("@@") === 0 ? Symbol[apply(strSlice, name, [2])] : name);
  const keyName = (k) => {
    if (typeof k !== "symbol") return k;
    const d = k.description;
    return "@@" + (typeof d === "string" && d.indexOf("Symbol.") === 0 ? apply(strSlice, d, [7]) : d);
  };
  const resolve = (path) => {
    let o = G;
    let rest = path === "globalThis" ? "" : path;
    if (path[0] === "%") {
      const end = path.indexOf("%", 1) + 1;
      try { o = ANON[apply(strSlice, path, [0, end])](); } catch (e) { return undefined; }
      rest = apply(strSlice, path, [end + 1]);
    }
    if (rest === "") return o;
    for (const part of rest.split(".")) {
      if ((typeof o !== "object" && typeof o !== "function") || o === null) return undefined;
      const d = getDesc(o, keyOf(part));
      if (d === undefined || !("value" in d)) return undefined;
      o = d.value;
    }
    return (typeof o === "object" && o !== null) || typeof o === "function" ? o : undefined;
  };
  const drop = (o, k, label) => {
    if (deleteProp(o, k)) { apply(arrPush, removed, [label]); return; }
    // Not configurable (a `var` of the engine's own): emptied instead.
    try { defineProp(o, k, { value: undefined, writable: false }); } catch (e) {}
    apply(arrPush, kept, [label]);
  };
  // A label is "holder.key", a global's name, or "get holder.name.key" for a key of an accessor.
  const dropLabel = (label) => {
    let part = "";
    if (label.indexOf("get ") === 0 || label.indexOf("set ") === 0) {
      part = apply(strSlice, label, [0, 3]);
      label = apply(strSlice, label, [4]);
    }
    const dot = label.lastIndexOf(".");
    const inName = label[0] === "%" && dot < label.indexOf("%", 1);
    let holder = dot === -1 || inName ? G : resolve(apply(strSlice, label, [0, dot]));
    const key = keyOf(dot === -1 || inName ? label : apply(strSlice, label, [dot + 1]));
    if (part !== "") {
      const path = apply(strSlice, label, [0, dot]);
      const at = path.lastIndexOf(".");
      const owner = at === -1 ? G : resolve(apply(strSlice, path, [0, at]));
      const d = owner === undefined ? undefined : getDesc(owner, keyOf(at === -1 ? path : apply(strSlice, path, [at + 1])));
      holder = d === undefined ? undefined : d[part];
    }
    if (holder !== undefined && getDesc(holder, key) !== undefined) drop(holder, key, (part ? part + " " : "") + label);
  };
  if (KNOWN !== null) {
    for (let i = 0; i < KNOWN.length; i++) dropLabel(KNOWN[i]);
  } else {
  // <walk>
  const listed = new Map();
  for (const path of ownKeys(ALLOWED)) {
    const o = resolve(path);
    if (o === undefined) continue;
    const names = listed.get(o);
    if (names === undefined) listed.set(o, { path: path, names: new Set(ALLOWED[path]) });
    else for (const n of ALLOWED[path]) names.names.add(n);
  }
  const functionsSeen = new Set();
  const trimFunction = (f, label) => {
    if (functionsSeen.has(f)) return;
    functionsSeen.add(f);
    for (const k of ownKeys(f)) {
      const n = keyName(k);
      if (FUNCTION_KEYS.indexOf(n) === -1) drop(f, k, label + "." + n);
    }
  };
  for (const [o, entry] of listed) {
    const prefix = entry.path === "globalThis" ? "" : entry.path + ".";
    for (const k of ownKeys(o)) {
      const n = keyName(k);
      if (!entry.names.has(n)) { drop(o, k, prefix + n); continue; }
      const d = getDesc(o, k);
      const parts = [["", d.value], ["get ", d.get], ["set ", d.set]];
      for (let i = 0; i < parts.length; i++) {
        const v = parts[i][1];
        if (((typeof v !== "object" || v === null) && typeof v !== "function") || listed.has(v)) continue;
        if (typeof v === "function") trimFunction(v, parts[i][0] + prefix + n);
        else { drop(o, k, prefix + n); break; }
      }
    }
  }
  // </walk>
  }
  if (!LOCK) {
    // A realm used for one job only (QuickJS): nothing to lock, but no string may become code.
    const refuse = function () { throw new EvalError("Code generation from strings disallowed for this context"); };
    for (const f of [function () {}, function* () {}, async function () {}, async function* () {}]) {
      defineProp(getProto(f), "constructor", { value: refuse, writable: false, configurable: false });
    }
    defineProp(G, "eval", { value: refuse, writable: true, configurable: true });
    defineProp(G, "Function", { value: refuse, writable: true, configurable: true });
  }

  let frozen = 0;
  const snaps = [];
  // Set when a body touched anything that can queue work for later (promise machinery): only then
  // does the worker pay a second round trip to settle the realm after that work has run.
  let mayQueue = false;
  let touched = false;
  // <lock>
  if (LOCK) {
    const flagGlobal = (name) => {
      const d = getDesc(G, name);
      if (d === undefined || !("value" in d)) return;
      const v = d.value;
      const accessors = {
        get [name]() { mayQueue = true; return v; },
        set [name](x) { mayQueue = true; defineProp(G, name, { value: x, writable: true, enumerable: false, configurable: true }); },
      };
      const a = getDesc(accessors, name);
      defineProp(G, name, { get: a.get, set: a.set, enumerable: d.enumerable, configurable: true });
    };
    const globalNames = ownKeys(G);
    for (let i = 0; i < globalNames.length; i++) {
      const n = globalNames[i];
      if (typeof n === "string" && (n === "Promise" || n.indexOf("Async") !== -1)) flagGlobal(n);
    }
    // Property attributes of an intrinsic change only through these: each call marks the realm
    // touched, and only then does the repair compare whole descriptors (the common case compares values).
    const watchAttributes = (holder, name) => {
      const original = holder[name];
      if (typeof original !== "function") return;
      const wrapper = {
        [name](a, b, c) { touched = true; return apply(original, this, arguments); },
      }[name];
      defineProp(wrapper, "length", { value: original.length, configurable: true });
      defineProp(holder, name, { value: wrapper, writable: true, enumerable: false, configurable: true });
    };
    for (const name of ["defineProperty", "defineProperties", "freeze", "seal", "preventExtensions", "setPrototypeOf"]) {
      watchAttributes(Object, name);
    }
    for (const name of ["defineProperty", "preventExtensions", "setPrototypeOf"]) watchAttributes(Reflect, name);
    for (const name of ["__defineGetter__", "__defineSetter__"]) watchAttributes(ObjectProto, name);
    // A method, not a function: like the original, it is no constructor; its name is the original's.
    const originalFromAsync = Array.fromAsync;
    if (typeof originalFromAsync === "function") {
      const wrapper = { fromAsync(items) { mayQueue = true; return apply(originalFromAsync, this, arguments); } }.fromAsync;
      defineProp(wrapper, "length", { value: originalFromAsync.length, configurable: true });
      defineProp(Array, "fromAsync", { value: wrapper, writable: true, enumerable: false, configurable: true });
    }
    // --- the intrinsics: every object reachable from the globals and a few anonymous roots -----------
    const anon = [];
    for (const n of ownKeys(ANON)) {
      try { const v = ANON[n](); if (v !== undefined && v !== null) apply(arrPush, anon, [v]); } catch (e) {}
    }

    const arrayIterProto = getProto([][Symbol.iterator]());
    // Object.prototype first: every later repair reads descriptors that inherit from it.
    const watched = [
      ObjectProto, G, Array.prototype, Function.prototype, String.prototype, Number.prototype,
      Boolean.prototype, RegExp.prototype, arrayIterProto, getProto(arrayIterProto),
      getProto(""[Symbol.iterator]()),
      Error.prototype, TypeError.prototype, RangeError.prototype, SyntaxError.prototype,
      ReferenceError.prototype, EvalError.prototype, URIError.prototype,
    ];
    if (typeof AggregateError === "function") apply(arrPush, watched, [AggregateError.prototype]);
    if (typeof SuppressedError === "function") apply(arrPush, watched, [SuppressedError.prototype]);
    const watchedSet = new Set(watched);

    const seen = new Set();
    const queue = [G];
    for (const a of anon) apply(arrPush, queue, [a]);
    for (let i = 0; i < queue.length; i++) {
      const o = queue[i];
      if (seen.has(o)) continue;
      seen.add(o);
      const p = getProto(o);
      if (p !== null) apply(arrPush, queue, [p]);
      for (const k of ownKeys(o)) {
        const d = getDesc(o, k);
        if (d === undefined) continue;
        for (const v of [d.value, d.get, d.set]) {
          if ((typeof v === "object" && v !== null) || typeof v === "function") apply(arrPush, queue, [v]);
        }
      }
    }
    for (const o of seen) {
      if (!watchedSet.has(o)) {
        try { freeze(o); frozen++; } catch (e) {}
      }
    }

    // --- snapshots of the watched objects -------------------------------------------------------------
    function snapshot(o) {
      const keys = ownKeys(o);
      const descs = [];
      for (let i = 0; i < keys.length; i++) apply(arrPush, descs, [setProto(getDesc(o, keys[i]), null)]);
      const index = new Map();
      for (let i = 0; i < keys.length; i++) index.set(keys[i], i);
      const dataAt = [];
      for (let i = 0; i < keys.length; i++) if ("value" in descs[i]) apply(arrPush, dataAt, [i]);
      return { o: o, proto: getProto(o), keys: keys, descs: descs, index: index, dataAt: dataAt };
    }
    for (let i = 0; i < watched.length; i++) apply(arrPush, snaps, [snapshot(watched[i])]);
  }
  // </lock>

  // <lock>
  // `have` comes fresh from getOwnPropertyDescriptor, so the fields of its own kind are own
  // properties; a field of the other kind would be looked up on Object.prototype, which is why
  // Object.prototype is repaired first, and why extra keys (any pollution) are deleted before the
  // descriptors are compared.
  function sameDesc(have, want) {
    if (have.enumerable !== want.enumerable || have.configurable !== want.configurable) return false;
    if ("value" in want) {
      return "value" in have && have.value === want.value && have.writable === want.writable;
    }
    return !("value" in have) && have.get === want.get && have.set === want.set;
  }

  // Repairs one watched object; answers "" or why it cannot be repaired. No iteration protocol is
  // used here: %ArrayIteratorPrototype%.next is itself a watched, writable intrinsic. Unless the realm
  // was touched (an attribute-changing call ran) or its keys changed, only data values are compared:
  // a value read is a plain load, where a descriptor is an allocation.
  function repair(s, full) {
    const o = s.o;
    if (!isExtensible(o)) return "an intrinsic was made non-extensible";
    if (getProto(o) !== s.proto) {
      try { setProto(o, s.proto); } catch (e) { return "an intrinsic's prototype was replaced"; }
    }
    const keys = ownKeys(o);
    let same = keys.length === s.keys.length;
    for (let i = 0; same && i < keys.length; i++) same = keys[i] === s.keys[i];
    if (!same) {
      for (let i = 0; i < keys.length; i++) {
        if (!s.index.has(keys[i]) && !deleteProp(o, keys[i])) {
          return "a non-configurable property was added to an intrinsic";
        }
      }
    }
    if (same && !full) {
      const dataAt = s.dataAt;
      for (let j = 0; j < dataAt.length; j++) {
        const i = dataAt[j];
        if (o[s.keys[i]] !== s.descs[i].value) {
          try { defineProp(o, s.keys[i], s.descs[i]); } catch (e) { return "an intrinsic's property was locked"; }
        }
      }
      return "";
    }
    for (let i = 0; i < s.keys.length; i++) {
      const want = s.descs[i];
      const have = getDesc(o, s.keys[i]);
      if (have === undefined || !sameDesc(have, want)) {
        try { defineProp(o, s.keys[i], want); } catch (e) { return "an intrinsic's property was locked"; }
      }
    }
    return "";
  }
  // </lock>

  // --- compiled bodies ----------------------------------------------------------------------------
  let cache = { __proto__: null };
  let cached = 0;

  function cut(s) {
    return s.length > MAX_MESSAGE ? apply(strSlice, s, [0, MAX_MESSAGE - 1]) + "\u2026" : s;
  }

  function show(e) {
    let s;
    try { s = StringCtor(e); } catch (e2) { s = "a thrown value that cannot be shown"; }
    if (typeof s !== "string") s = "a thrown value that cannot be shown";
    return cut(s);
  }

  function what(r) {
    if (r === null) return "null";
    if (r === undefined) return "undefined";
    const t = typeof r;
    if (t === "function") return "a function";
    if (t !== "object") return "a " + t;
    if (isArray(r)) return "an array";
    let thenable = false;
    try { thenable = typeof r.then === "function"; } catch (e) { thenable = false; }
    if (thenable) return "a promise or thenable";
    const p = getProto(r);
    if (p === ObjectProto || p === null) return "";
    let name = "";
    try { const c = p.constructor; name = typeof c === "function" && typeof c.name === "string" ? c.name : ""; } catch (e) {}
    return name ? "an instance of " + cut(name) : "an object that is not a plain object";
  }

  function settle() {
    const full = touched;
    touched = false;
    for (let i = 0; i < snaps.length; i++) {
      const why = repair(snaps[i], full);
      if (why !== "") return why;
    }
    return "";
  }

  function call(factory, args) {
    let result;
    try {
      const fn = factory();
      result = apply(fn, undefined, args);
    } catch (e) {
      return "T" + show(e);
    }
    const bad = what(result);
    if (bad !== "") return "R" + "returned " + bad + ", not a plain object";
    let text;
    try { text = stringify(result); } catch (e) { return "R" + "returned an object that cannot be serialized: " + show(e); }
    if (typeof text !== "string") return "R" + "returned an object that cannot be serialized";
    if (text.length > MAX_RESULT) return "R" + "returned " + text.length + " characters of JSON; the limit is " + MAX_RESULT;
    return "O" + text;
  }

  return freeze({
    // Registers a body's factory. `length` is the factory's intended source length: a body that
    // closed the function early yields a shorter literal, and is refused as not a function body.
    d(key, length, factory) {
      const text = apply(fnToString, factory, []);
      if (text.length !== length) return false;
      if (cached >= 1024) { cache = { __proto__: null }; cached = 0; }
      cache[key] = factory;
      cached++;
      return true;
    },
    // Runs a body. Answers a status letter, a flag letter, then the payload:
    //   status  O ok (JSON text) | T threw | R refused result | M not defined | C not a body
    //   flag    "-" | "q" may have queued work | "t" left the realm tainted | "u" both
    // The realm is settled at the end of every job, inside the job's own engine call. Work a job
    // may queue (promise callbacks) runs after that call: the job is then flagged, and the worker
    // settles again behind that work (c) before it answers.
    r(key, argsText) {
      const factory = cache[key];
      if (factory === undefined) return "M-";
      const args = parse(argsText);
      mayQueue = false;
      const out = call(factory, args);
      const tainted = settle() !== "";
      const flag = mayQueue ? (tainted ? "u" : "q") : (tainted ? "t" : "-");
      return out[0] + flag + apply(strSlice, out, [1]);
    },
    // After the work a job queued has run: undo what it left behind.
    c() { return settle(); },
    forget() { cache = { __proto__: null }; cached = 0; },
    stats() { return stringify({ frozen: frozen, watched: snaps.length, cached: cached, removed: removed, kept: kept }); },
  });
})();
__RUNNER__.stats();
"""


def setup_script(runner: str, *, lock: bool = True, known: Sequence[str] | None = None) -> str:
    """The realm's setup script, binding the runner to ``runner`` (a random identifier).

    ``lock`` freezes and snapshots the intrinsics, for a realm that serves many jobs; a realm used
    for a single job skips it. ``known`` is what the allowlist took out of an earlier realm of the
    same engine build (its report's ``removed`` and ``kept``): exactly that is taken out, without
    walking the intrinsics again.
    """
    allowed = "null" if known is not None else json.dumps({path: list(names) for path, names in INTRINSICS.items()})
    script = _SETUP
    # Parts that cannot run are left out: a QuickJS context compiles this script for every job.
    if not lock:
        script = _without(script, "lock")
    if known is not None:
        script = _without(script, "walk")
    return (
        script.replace("__RUNNER__", runner)
        .replace("__LOCK__", "true" if lock else "false")
        .replace("__ANONYMOUS__", _anonymous_js())
        .replace("__ALLOWED__", allowed)
        .replace("__KNOWN__", "null" if known is None else json.dumps(list(known)))
        .replace("__FUNCTION_KEYS__", json.dumps(list(FUNCTION_KEYS)))
        .replace("__MAX_MESSAGE__", str(MAX_MESSAGE_CHARS))
        .replace("__MAX_RESULT__", str(MAX_RESULT_CHARS))
    )


def _without(script: str, part: str) -> str:
    """``script`` without its ``// <part>`` ... ``// </part>`` sections."""
    return re.sub(rf"^  // <{part}>$.*?^  // </{part}>$\n", "", script, flags=re.DOTALL | re.MULTILINE)


def _anonymous_js() -> str:
    entries = ", ".join(f"{json.dumps(name)}: () => {expression}" for name, expression in ANONYMOUS.items())
    return "{ __proto__: null, " + entries + " }"


def factory_source(kind: str, body: str) -> str:
    """The factory literal a body is compiled into: a fresh closure per call, so nothing a body
    hangs on its own function object (``arguments.callee.x = …``) outlives the call."""
    return f"function () {{ return function ({PARAMETERS[kind]}) {{\n{body}\n}}; }}"


def js_length(text: str) -> int:
    """Length of ``text`` as JavaScript counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2
