"""The realm's allowlist: every global a logic body may see, and every own property of each intrinsic.

The logic contract (``logic-contract.md``) gives a body "JavaScript's own built-ins and nothing else",
minus a list it forbids. Read here as: what ECMA-262 (its current draft, so every finished proposal)
and ECMA-402 (``Intl``, as V8 ships it: a few of its ``Intl.Locale`` getters are still a stage 3
proposal) define, Annex B included, with

- what the contract forbids taken out: ``ArrayBuffer``, ``SharedArrayBuffer``, ``DataView``, the typed
  arrays, ``Atomics``, ``WeakRef``, ``FinalizationRegistry``, ``Symbol.for`` and ``Symbol.keyFor``
  (``eval`` and ``Function`` stay as names; they throw);
- ``Temporal`` taken out, by decision: it is not in a published edition yet (finished, expected in
  ECMAScript 2027), QuickJS lacks it (a body using it would run on one engine only), ``Temporal.Now`` is
  a second clock beside ``Date.now``, and it is a large new implementation in V8 (fresh attack surface)
  that no body needs, since ``Date`` and ``Intl`` cover dates. ``Date.prototype.toTemporalInstant`` goes
  with it;
- the legacy ``RegExp`` statics (``RegExp.$1``, ``lastMatch``, ...) taken out: they carry one job's last
  match into the next;
- what engines add of their own taken out: V8's ``Intl.v8BreakIterator`` and ``Error.captureStackTrace``,
  QuickJS's ``performance`` (a sub-millisecond timer), ``DOMException``, ``InternalError``,
  ``Error.prepareStackTrace`` and ``Function.prototype.fileName``/``lineNumber``/``columnNumber``, dukpy's
  ``call_python`` and ``dukpy``, mini-racer's ``setTimeout`` shim, ``console``, ``WebAssembly``, ...;
  one is kept: ``Error.stackTraceLimit``, without which V8 gives errors no ``stack`` (frozen there).

``INTRINSICS`` maps each intrinsic object (a path from the global object, or ``%Name%`` for one that has
no global path) to the own property names it may keep; a symbol key is ``@@`` and its description
(``@@iterator``). The realm (``realm.setup_script``) deletes every other own property of these objects,
every extra own property of the functions they hold (a built-in function has only ``length`` and
``name``), and any object they hold that is not listed here; it reports what it deleted, and
``tests/evaluator/test_realm.py`` pins that report per engine, so an engine upgrade that adds a
property fails CI naming it. An engine may lack a listed name (QuickJS has no ``Intl``).
"""

from __future__ import annotations

from typing import Final

# Anonymous intrinsics: how the realm reaches each (a JavaScript expression).
ANONYMOUS: Final = {
    "%GeneratorFunction.prototype%": "Object.getPrototypeOf(function* () {})",
    "%AsyncFunction.prototype%": "Object.getPrototypeOf(async function () {})",
    "%AsyncGeneratorFunction.prototype%": "Object.getPrototypeOf(async function* () {})",
    "%AsyncIteratorPrototype%": "Object.getPrototypeOf(Object.getPrototypeOf(async function* () {}).prototype)",
    "%ArrayIteratorPrototype%": "Object.getPrototypeOf([][Symbol.iterator]())",
    "%StringIteratorPrototype%": 'Object.getPrototypeOf(""[Symbol.iterator]())',
    "%MapIteratorPrototype%": "Object.getPrototypeOf(new Map()[Symbol.iterator]())",
    "%SetIteratorPrototype%": "Object.getPrototypeOf(new Set()[Symbol.iterator]())",
    "%RegExpStringIteratorPrototype%": 'Object.getPrototypeOf(/a/[Symbol.matchAll](""))',
    "%IteratorHelperPrototype%": "Object.getPrototypeOf([].values().map((x) => x))",
    "%WrapForValidIteratorPrototype%": "Object.getPrototypeOf(Iterator.from({ next() { return { done: true }; } }))",
    "%SegmentsPrototype%": 'Object.getPrototypeOf(new Intl.Segmenter().segment(""))',
    "%SegmentIteratorPrototype%": 'Object.getPrototypeOf(new Intl.Segmenter().segment("")[Symbol.iterator]())',
    "%ThrowTypeError%": 'Object.getOwnPropertyDescriptor(Function.prototype, "caller").get',
}

# What a built-in function other than those listed below may have of its own.
FUNCTION_KEYS: Final = ("length", "name")

_TABLE: Final = {
    "AggregateError": "length name prototype",
    "AggregateError.prototype": "constructor message name",
    "Array": "@@species from fromAsync isArray length name of prototype",
    "Array.prototype": (
        "@@iterator @@unscopables at concat constructor copyWithin entries every fill filter find findIndex"
        " findLast findLastIndex flat flatMap forEach includes indexOf join keys lastIndexOf length map pop"
        " push reduce reduceRight reverse shift slice some sort splice toLocaleString toReversed toSorted"
        " toSpliced toString unshift values with"
    ),
    "Array.prototype.@@unscopables": (
        "at copyWithin entries fill find findIndex findLast findLastIndex flat flatMap includes keys"
        " toReversed toSorted toSpliced values"
    ),
    "AsyncDisposableStack": "length name prototype",
    "AsyncDisposableStack.prototype": (
        "@@asyncDispose @@toStringTag adopt constructor defer disposeAsync disposed move use"
    ),
    "BigInt": "asIntN asUintN length name prototype",
    "BigInt.prototype": "@@toStringTag constructor toLocaleString toString valueOf",
    "Boolean": "length name prototype",
    "Boolean.prototype": "constructor toString valueOf",
    "Date": "UTC length name now parse prototype",
    "Date.prototype": (
        "@@toPrimitive constructor getDate getDay getFullYear getHours getMilliseconds getMinutes getMonth"
        " getSeconds getTime getTimezoneOffset getUTCDate getUTCDay getUTCFullYear getUTCHours"
        " getUTCMilliseconds getUTCMinutes getUTCMonth getUTCSeconds getYear setDate setFullYear setHours"
        " setMilliseconds setMinutes setMonth setSeconds setTime setUTCDate setUTCFullYear setUTCHours"
        " setUTCMilliseconds setUTCMinutes setUTCMonth setUTCSeconds setYear toDateString toGMTString"
        " toISOString toJSON toLocaleDateString toLocaleString toLocaleTimeString toString toTimeString"
        " toUTCString valueOf"
    ),
    "DisposableStack": "length name prototype",
    "DisposableStack.prototype": "@@dispose @@toStringTag adopt constructor defer dispose disposed move use",
    "Error": "isError length name prototype stackTraceLimit",
    "Error.prototype": "constructor message name toString",
    "EvalError": "length name prototype",
    "EvalError.prototype": "constructor message name",
    "Function": "length name prototype",
    "Function.prototype": "@@hasInstance apply arguments bind call caller constructor length name toString",
    "Intl": (
        "@@toStringTag Collator DateTimeFormat DisplayNames DurationFormat ListFormat Locale NumberFormat"
        " PluralRules RelativeTimeFormat Segmenter getCanonicalLocales supportedValuesOf"
    ),
    "Intl.Collator": "length name prototype supportedLocalesOf",
    "Intl.Collator.prototype": "@@toStringTag compare constructor resolvedOptions",
    "Intl.DateTimeFormat": "length name prototype supportedLocalesOf",
    "Intl.DateTimeFormat.prototype": (
        "@@toStringTag constructor format formatRange formatRangeToParts formatToParts resolvedOptions"
    ),
    "Intl.DisplayNames": "length name prototype supportedLocalesOf",
    "Intl.DisplayNames.prototype": "@@toStringTag constructor of resolvedOptions",
    "Intl.DurationFormat": "length name prototype supportedLocalesOf",
    "Intl.DurationFormat.prototype": "@@toStringTag constructor format formatToParts resolvedOptions",
    "Intl.ListFormat": "length name prototype supportedLocalesOf",
    "Intl.ListFormat.prototype": "@@toStringTag constructor format formatToParts resolvedOptions",
    "Intl.Locale": "length name prototype",
    "Intl.Locale.prototype": (
        "@@toStringTag baseName calendar caseFirst collation constructor firstDayOfWeek getCalendars"
        " getCollations getHourCycles getNumberingSystems getTextInfo getTimeZones getWeekInfo hourCycle"
        " language maximize minimize numberingSystem numeric region script toString"
    ),
    "Intl.NumberFormat": "length name prototype supportedLocalesOf",
    "Intl.NumberFormat.prototype": (
        "@@toStringTag constructor format formatRange formatRangeToParts formatToParts resolvedOptions"
    ),
    "Intl.PluralRules": "length name prototype supportedLocalesOf",
    "Intl.PluralRules.prototype": "@@toStringTag constructor resolvedOptions select selectRange",
    "Intl.RelativeTimeFormat": "length name prototype supportedLocalesOf",
    "Intl.RelativeTimeFormat.prototype": "@@toStringTag constructor format formatToParts resolvedOptions",
    "Intl.Segmenter": "length name prototype supportedLocalesOf",
    "Intl.Segmenter.prototype": "@@toStringTag constructor resolvedOptions segment",
    "Iterator": "concat from length name prototype",
    "Iterator.prototype": (
        "@@dispose @@iterator @@toStringTag constructor drop every filter find flatMap forEach map reduce"
        " some take toArray"
    ),
    "JSON": "@@toStringTag isRawJSON parse rawJSON stringify",
    "Map": "@@species groupBy length name prototype",
    "Map.prototype": (
        "@@iterator @@toStringTag clear constructor delete entries forEach get getOrInsert"
        " getOrInsertComputed has keys set size values"
    ),
    "Math": (
        "@@toStringTag E LN10 LN2 LOG10E LOG2E PI SQRT1_2 SQRT2 abs acos acosh asin asinh atan atan2 atanh"
        " cbrt ceil clz32 cos cosh exp expm1 f16round floor fround hypot imul log log10 log1p log2 max min pow"
        " random round sign sin sinh sqrt sumPrecise tan tanh trunc"
    ),
    "Number": (
        "EPSILON MAX_SAFE_INTEGER MAX_VALUE MIN_SAFE_INTEGER MIN_VALUE NEGATIVE_INFINITY NaN"
        " POSITIVE_INFINITY isFinite isInteger isNaN isSafeInteger length name parseFloat parseInt prototype"
    ),
    "Number.prototype": "constructor toExponential toFixed toLocaleString toPrecision toString valueOf",
    "Object": (
        "assign create defineProperties defineProperty entries freeze fromEntries getOwnPropertyDescriptor"
        " getOwnPropertyDescriptors getOwnPropertyNames getOwnPropertySymbols getPrototypeOf groupBy hasOwn is"
        " isExtensible isFrozen isSealed keys length name preventExtensions prototype seal setPrototypeOf"
        " values"
    ),
    "Object.prototype": (
        "__defineGetter__ __defineSetter__ __lookupGetter__ __lookupSetter__ __proto__ constructor"
        " hasOwnProperty isPrototypeOf propertyIsEnumerable toLocaleString toString valueOf"
    ),
    "Promise": "@@species all allSettled any length name prototype race reject resolve try withResolvers",
    "Promise.prototype": "@@toStringTag catch constructor finally then",
    "Proxy": "length name revocable",
    "RangeError": "length name prototype",
    "RangeError.prototype": "constructor message name",
    "ReferenceError": "length name prototype",
    "ReferenceError.prototype": "constructor message name",
    "Reflect": (
        "@@toStringTag apply construct defineProperty deleteProperty get getOwnPropertyDescriptor"
        " getPrototypeOf has isExtensible ownKeys preventExtensions set setPrototypeOf"
    ),
    "RegExp": "@@species escape length name prototype",
    "RegExp.prototype": (
        "@@match @@matchAll @@replace @@search @@split compile constructor dotAll exec flags global"
        " hasIndices ignoreCase multiline source sticky test toString unicode unicodeSets"
    ),
    "Set": "@@species length name prototype",
    "Set.prototype": (
        "@@iterator @@toStringTag add clear constructor delete difference entries forEach has intersection"
        " isDisjointFrom isSubsetOf isSupersetOf keys size symmetricDifference union values"
    ),
    "String": "fromCharCode fromCodePoint length name prototype raw",
    "String.prototype": (
        "@@iterator anchor at big blink bold charAt charCodeAt codePointAt concat constructor endsWith fixed"
        " fontcolor fontsize includes indexOf isWellFormed italics lastIndexOf length link localeCompare match"
        " matchAll normalize padEnd padStart repeat replace replaceAll search slice small split startsWith"
        " strike sub substr substring sup toLocaleLowerCase toLocaleUpperCase toLowerCase toString toUpperCase"
        " toWellFormed trim trimEnd trimLeft trimRight trimStart valueOf"
    ),
    "SuppressedError": "length name prototype",
    "SuppressedError.prototype": "constructor message name",
    "Symbol": (
        "asyncDispose asyncIterator dispose hasInstance isConcatSpreadable iterator length match matchAll"
        " name prototype replace search species split toPrimitive toStringTag unscopables"
    ),
    "Symbol.prototype": "@@toPrimitive @@toStringTag constructor description toString valueOf",
    "SyntaxError": "length name prototype",
    "SyntaxError.prototype": "constructor message name",
    "TypeError": "length name prototype",
    "TypeError.prototype": "constructor message name",
    "URIError": "length name prototype",
    "URIError.prototype": "constructor message name",
    "WeakMap": "length name prototype",
    "WeakMap.prototype": "@@toStringTag constructor delete get getOrInsert getOrInsertComputed has set",
    "WeakSet": "length name prototype",
    "WeakSet.prototype": "@@toStringTag add constructor delete has",
    "globalThis": (
        "AggregateError Array AsyncDisposableStack BigInt Boolean Date DisposableStack Error EvalError"
        " Function Infinity Intl Iterator JSON Map Math NaN Number Object Promise Proxy RangeError"
        " ReferenceError Reflect RegExp Set String SuppressedError Symbol SyntaxError TypeError URIError"
        " WeakMap WeakSet decodeURI decodeURIComponent encodeURI encodeURIComponent escape eval globalThis"
        " isFinite isNaN parseFloat parseInt undefined unescape"
    ),
    "%ArrayIteratorPrototype%": "@@toStringTag next",
    "%AsyncFunction.prototype%": "@@toStringTag constructor",
    "%AsyncFunction.prototype%.constructor": "length name prototype",
    "%AsyncGeneratorFunction.prototype%": "@@toStringTag constructor prototype",
    "%AsyncGeneratorFunction.prototype%.constructor": "length name prototype",
    "%AsyncGeneratorFunction.prototype%.prototype": "@@toStringTag constructor next return throw",
    "%AsyncIteratorPrototype%": "@@asyncDispose @@asyncIterator",
    "%GeneratorFunction.prototype%": "@@toStringTag constructor prototype",
    "%GeneratorFunction.prototype%.constructor": "length name prototype",
    "%GeneratorFunction.prototype%.prototype": "@@toStringTag constructor next return throw",
    "%IteratorHelperPrototype%": "@@toStringTag next return",
    "%MapIteratorPrototype%": "@@toStringTag next",
    "%RegExpStringIteratorPrototype%": "@@toStringTag next",
    "%SegmentIteratorPrototype%": "@@toStringTag next",
    "%SegmentsPrototype%": "@@iterator containing",
    "%SetIteratorPrototype%": "@@toStringTag next",
    "%StringIteratorPrototype%": "@@toStringTag next",
    "%WrapForValidIteratorPrototype%": "next return",
}

INTRINSICS: Final[dict[str, tuple[str, ...]]] = {path: tuple(names.split()) for path, names in _TABLE.items()}
GLOBALS: Final = INTRINSICS["globalThis"]
