"""The four logic bodies of a calculated scenario, as ordinary JavaScript under the logic contract (pure).

Every value that came from the recording (a constant argument, an object key, a field name on an output
path, a message) enters a body only as a JSON literal written with ``ensure_ascii`` — so quotes,
backticks, ``${…}``, ``</script>`` and the line separators U+2028/U+2029 are escapes inside a string
literal and never code: a tool output is untrusted input and can never become a program.

An output body fails closed: a list rule that no longer holds on new data (two rows where the recording
had one, a tie for the highest value, an empty list, a missing field) throws, and the plan hands the
turn back to the model rather than guess.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from bir.hooks.local.trace import Arr, Const, Expr, Extraction, Obj, OutRef, ParamRef, PathStep, Template

PARAMS_LOGIC = "return params;"
RESPONSE_PARAMS_LOGIC = "return respParams;"

# Helpers an output body defines for itself (no body sees another's globals).
_HELPERS = (
    "function __need(o, k, what) {"
    " if (o === null || typeof o !== 'object' || !Object.prototype.hasOwnProperty.call(o, k))"
    " throw new Error(what + ': no field ' + JSON.stringify(k)); return o[k]; }\n"
    "function __json(s, what) { if (typeof s !== 'string') throw new Error(what + ': expected JSON text');"
    " return JSON.parse(s); }\n"
    "function __lines(s, what) { if (typeof s !== 'string') throw new Error(what + ': expected text');"
    " return s.trim().split('\\n').map(function (l) { return l.trim(); }); }\n"
    "function __words(s, what) { if (typeof s !== 'string') throw new Error(what + ': expected a line');"
    " return s.trim().split(/\\s+/); }\n"
    "function __pick(a, rule, field, what) {"
    " if (!Array.isArray(a)) throw new Error(what + ': expected a list');"
    " if (rule === 'only') { if (a.length !== 1) throw new Error(what + ': expected exactly one row, got ' + a.length);"
    " return a[0]; }"
    " if (a.length === 0) throw new Error(what + ': the list is empty');"
    " if (rule === 'first') return a[0];"
    " if (rule === 'last') return a[a.length - 1];"
    " var best = -1, tie = false;"
    " for (var i = 0; i < a.length; i++) {"
    " var v = a[i] !== null && typeof a[i] === 'object' ? a[i][field] : undefined;"
    " if (typeof v !== 'number')"
    " throw new Error(what + ': row ' + (i + 1) + ' has no number ' + JSON.stringify(field));"
    " if (best < 0 || (rule === 'max' ? v > a[best][field] : v < a[best][field])) { best = i; tie = false; }"
    " else if (v === a[best][field]) tie = true; }"
    " if (tie) throw new Error(what + ': more than one row has the ' + (rule === 'max' ? 'highest ' : 'lowest ')"
    " + JSON.stringify(field));"
    " return a[best]; }\n"
)


def literal(value: object) -> str:
    """``value`` as a JavaScript literal that is data and nothing else."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


def expression(expr: Expr) -> str:
    """The JavaScript expression for a traced argument."""
    if isinstance(expr, Const):
        return literal(expr.value)
    if isinstance(expr, ParamRef):
        ref = f"params[{literal(expr.name)}]"
        if expr.case == "lower":
            return f"String({ref}).toLowerCase()"
        if expr.case == "upper":
            return f"String({ref}).toUpperCase()"
        return ref
    if isinstance(expr, OutRef):
        return f"respParams[{literal(expr.key)}]"
    if isinstance(expr, Template):
        pieces = [literal(p) if isinstance(p, str) else f"String({expression(p)})" for p in expr.parts]
        return "(" + " + ".join(pieces) + ")"
    if isinstance(expr, Obj):
        return "{" + ", ".join(f"{literal(k)}: {expression(v)}" for k, v in expr.items) + "}"
    if isinstance(expr, Arr):
        return "[" + ", ".join(expression(v) for v in expr.items) + "]"
    raise TypeError(f"not an expression: {expr!r}")


def tool_input_logic(expr: Expr) -> str:
    """The step's ``toolInputLogic``: its arguments rebuilt from ``params`` and ``respParams``."""
    if not isinstance(expr, Obj):
        raise TypeError("a step's input is an object")
    return f"return {expression(expr)};"


def _chain(path: Sequence[PathStep], what: str) -> str:
    code = "__root"
    label = literal(what)
    for step in path:
        kind = step[0]
        if kind == "key":
            code = f"__need({code}, {literal(step[1])}, {label})"
        elif kind == "json":
            code = f"__json({code}, {label})"
        elif kind == "trim":
            code = f"String({code}).trim()"
        elif kind == "lines":
            code = f"__lines({code}, {label})"
        elif kind == "words":
            code = f"__words({code}, {label})"
        elif kind == "row":
            rule = step[1]
            if isinstance(rule, tuple):
                code = f"__pick({code}, {literal(rule[0])}, {literal(rule[1])}, {label})"
            else:
                code = f"__pick({code}, {literal(rule)}, null, {label})"
        else:
            raise ValueError(f"unknown path step {step!r}")
    return code


def tool_output_logic(step_index: int, tool: str, extractions: Sequence[Extraction]) -> str | None:
    """The step's ``toolOutputLogic``: only the values later steps read, each by its rule; None when none are."""
    if not extractions:
        return None
    mcp = any(e.mcp for e in extractions)
    json_root = any(e.json_root for e in extractions)
    lines = [_HELPERS]
    if json_root:
        lines.append("var __root = JSON.parse(toolOutput);")
        if mcp:
            # The hook's view of an unwrapped server is the bare content array; the proxy's is the whole result.
            lines.append("if (Array.isArray(__root)) __root = { content: __root };")
    else:
        lines.append("var __root = toolOutput;")
    items = []
    for ex in extractions:
        what = f"step {step_index} ({tool}) output for {ex.key}"
        items.append(f"{literal(ex.key)}: {_chain(ex.path, what)}")
    lines.append("return {" + ", ".join(items) + "};")
    return "\n".join(lines)
