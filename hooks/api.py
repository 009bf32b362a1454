"""The control plane's one vocabulary (spec §16.1, §10): every route's request and answer.

The control server (``bir.hooks.server.routes``) and every client of it (``bir-proxy``'s work loop,
``bir-scenario``, ``bir replay``'s direct executor) import these types and nothing else of each other.
Bodies are JSON; field names are camelCase on the wire, except the hook routes, whose requests are
Claude Code's own hook input (snake_case) and whose answers are what the hook prints.

Every struct is frozen, new fields always get defaults, and unknown fields are ignored, so an older
and a newer ``bir`` on either side still understand each other. Decoders are built once per type.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Generic, Literal, TypeVar

import msgspec

from bir.hooks import hook_routes

# -- bounds ----------------------------------------------------------------------------------------

MAX_NAME: Final = 256
MAX_ERROR_CHARS: Final = 8_000
# A poll is held at most this long, then answered empty (§16.1).
POLL_HOLD_MS: Final = 25_000
# A step or call never waits longer than this through /replay/call.
MAX_CALL_TIMEOUT_MS: Final = 600_000

# The argument a hook adds to a wrapped MCP call so its proxy's report joins the hook (§7.1); the
# proxy declares it in tools/list and strips it before the upstream sees the call.
CALL_ID_KEY: Final = "__bir_call_id__"

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)]
OptName = Annotated[str, msgspec.Meta(max_length=MAX_NAME)] | None
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]


class _Body(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """A control-plane body: camelCase on the wire, defaults omitted, unknown fields ignored."""


# -- proxies (§16.1, §16.2) --------------------------------------------------------------------------


class RegisterRequest(_Body, frozen=True):
    """``POST /proxy/register``: a ``bir-proxy`` announces the server it wraps. ``host_pid`` is the Claude
    Code process that started it (``bir.core.host``): the hooks of the same session name the same one, so
    the proxy is that session's from its first registration (absent from an older proxy)."""

    server_name: Name
    proxy_id: Name
    pid: NonNegInt | None = None
    session_id: OptName = None
    started_at: float | None = None
    host_pid: NonNegInt | None = None


class RegisterAnswer(msgspec.Struct, frozen=True, rename="camel"):
    """Both fields always on the wire: a proxy paces itself by them."""

    replay: bool = False
    poll_hold_ms: NonNegInt = POLL_HOLD_MS


class UnregisterRequest(_Body, frozen=True):
    """``POST /proxy/unregister``: a ``bir-proxy`` whose host closed the session is gone from now on (an
    older control server answers 404, and the proxy reads as live until its polls stop counting)."""

    server_name: Name
    proxy_id: Name


class PollRequest(_Body, frozen=True):
    """``POST /proxy/poll``: held up to ``hold_ms`` (at most ``POLL_HOLD_MS``), then answered empty."""

    server_name: Name
    proxy_id: OptName = None
    started_at: float | None = None
    pid: NonNegInt | None = None
    hold_ms: NonNegInt | None = None
    host_pid: NonNegInt | None = None


class Work(_Body, frozen=True):
    """One call handed to a proxy. ``tool_name`` is the upstream's own name (``navigate_page``)."""

    work_id: Name
    tool_name: Name
    arguments: Any = None
    timeout_ms: NonNegInt = 60_000


class PollAnswer(_Body, frozen=True):
    """``{}`` (held and nothing came), ``{work}``, or ``{replay: false}`` (replay is off: poll slowly)."""

    work: Work | None = None
    replay: bool | None = None


class ResultRequest(_Body, frozen=True):
    """``POST /proxy/result``: exactly one of ``result`` and ``error``; neither means "sent, outcome unknown"."""

    work_id: Name
    result: Any = None
    error: str | None = None


class StepReport(_Body, frozen=True):
    """``POST /proxy/step``: one ``tools/call`` the proxy relayed for its host.

    ``result`` None with no ``error``: the call was sent and its outcome is unknown (never a success).
    ``call_id`` is the ``__bir_call_id__`` a hook injected; ``tool_use_id`` is the host's own id for the
    call (``_meta["claudecode/toolUseId"]``), which also tells the control server the proxy's session.
    """

    server_name: Name
    tool_name: Name
    arguments: Any = None
    result: Any = None
    error: str | None = None
    call_id: OptName = None
    tool_use_id: OptName = None
    duration_ms: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    proxy_id: OptName = None
    session_id: OptName = None


class Ok(_Body, frozen=True):
    ok: bool


# -- bir-scenario (§6.3) -----------------------------------------------------------------------------


class Hello(_Body, frozen=True):
    """``POST /scenario/hello``: a live ``bir-scenario``, how many tools it lists, and its host (the Claude
    Code process that started it, whose tool events its ``hook`` tool answers; absent from an older one)."""

    pid: NonNegInt
    version: Annotated[str, msgspec.Meta(max_length=MAX_NAME)]
    tools: NonNegInt
    off: bool
    host_pid: NonNegInt | None = None


class ScenarioRunRequest(_Body, frozen=True):
    """``POST /scenario/run``: run the armed plan of the session whose ``run_scenario`` call this is."""

    tool_use_id: OptName = None
    session_id: OptName = None


class ScenarioRunAnswer(_Body, frozen=True):
    """§16.1's answer: ``ok`` with the bundle, or ``why`` it did not run (``no_plan``, a note, …)."""

    ok: bool
    text: str | None = None
    response_model: dict[str, Any] | None = None
    steps: NonNegInt | None = None
    partial: bool | None = None
    why: str | None = None
    note: bool | None = None


NO_PLAN: Final = "no_plan"


# -- bir replay (§12.1) ------------------------------------------------------------------------------


class ReplayCallRequest(_Body, frozen=True):
    """``POST /replay/call``: one direct step of ``bir replay``, run on the proxy that owns its server."""

    server_name: Name
    tool_name: Name
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=MAX_CALL_TIMEOUT_MS)]
    arguments: Any = None


class ReplayCallAnswer(_Body, frozen=True):
    """``ok`` with the ``CallToolResult``, or not: ``sent`` says whether the call may have run."""

    ok: bool
    result: Any = None
    sent: bool | None = None
    why: str | None = None


class LastHello(_Body, frozen=True):
    """The newest ``/scenario/hello`` a control server heard, and how long ago (``bir status``)."""

    pid: int
    version: str
    tools: int
    off: bool
    age_ms: int


class Health(_Body, frozen=True):
    """``GET /health``. ``served``: servers with a proxy polling now; ``wrapped``: every server a proxy
    registered for since the server started; ``left``: those whose last proxy unregistered (its session
    closed) and none serves now; ``service``: ``ok``, ``cooling`` (after a failure, for
    ``service_cooling_ms`` more) or ``unconfigured``, absent while no controller is attached."""

    ok: bool
    pid: int
    version: str
    uptime_ms: int
    served: list[str] = msgspec.field(default_factory=list)
    left: list[str] = msgspec.field(default_factory=list)
    replay: bool = False
    wrapped: list[str] = msgspec.field(default_factory=list)
    last_hello: LastHello | None = None
    service: Literal["ok", "cooling", "unconfigured"] | None = None
    service_cooling_ms: NonNegInt | None = None


# -- Claude Code's hooks (§10) -------------------------------------------------------------------------

HookEvent = Literal[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SessionEnd",
]

# The `bir` MCP server (`bir-scenario`) as `bir install --replay` names it in a project, and its tool.
BIR_SERVER: Final = "bir"
RUN_SCENARIO_NAME: Final = "run_scenario"
# The tool as the model and the hooks see it (FACTS.md §3: `mcp__<server>__<tool>`).
RUN_SCENARIO_TOOL: Final = f"mcp__{BIR_SERVER}__{RUN_SCENARIO_NAME}"

# The route of each hook event and its deadlines (one stdlib table, shared with ``bir-hook``).
HOOK_ROUTES: Final = hook_routes.HOOK_ROUTES
# The field of ``HookInput`` that bir adds (the session's host), by its wire name.
HOOK_HOST_PID_FIELD: Final = hook_routes.HOST_PID_FIELD


# ``bir install --mcp-hooks``: the tool events answered by an ``mcp_tool`` hook on the ``bir`` MCP server
# (``bir-scenario``) instead of a ``bir-hook`` process (FACTS.md §3.3). Claude Code interpolates every
# ``${path}`` of the hook input into a string ("" when absent; objects become JSON text), so the tool
# takes each field as a string and rebuilds the hook input before POSTing it to the event's route.
MCP_HOOK_SERVER: Final = BIR_SERVER
MCP_HOOK_TOOL: Final = "hook"
MCP_HOOK_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
MCP_HOOK_FIELDS: Final = (
    "session_id",
    "hook_event_name",
    "transcript_path",
    "cwd",
    "permission_mode",
    "tool_name",
    "tool_input",
    "tool_response",
    "tool_use_id",
    "error",
    "is_interrupt",
    "duration_ms",
)
MCP_HOOK_INPUT: Final[dict[str, str]] = {name: "${" + name + "}" for name in MCP_HOOK_FIELDS}


class HookInput(msgspec.Struct, frozen=True, kw_only=True):
    """What Claude Code sends a hook (FACTS.md §3.1). Every field but ``session_id`` may be absent;
    unknown fields are ignored, so a newer Claude Code does not break an older ``bir``."""

    session_id: Name
    hook_event_name: OptName = None
    transcript_path: str | None = None
    cwd: str | None = None
    prompt_id: OptName = None
    permission_mode: OptName = None
    # UserPromptSubmit
    prompt: str | None = None
    # tool events
    tool_name: OptName = None
    tool_input: Any = None
    tool_response: Any = None
    tool_use_id: OptName = None
    error: str | None = None
    is_interrupt: bool | None = None
    duration_ms: float | None = None
    # Stop, SessionStart, SessionEnd
    stop_hook_active: bool | None = None
    last_assistant_message: str | None = None
    source: OptName = None
    reason: OptName = None
    # Not Claude Code's: the host (``bir.core.host``) that ``bir-hook`` or the ``hook`` tool adds, which
    # ties the session to the proxies its host started. Absent from an older bir.
    bir_host_pid: Annotated[int, msgspec.Meta(ge=0)] | None = None


class HookSpecificOutput(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    hook_event_name: str
    additional_context: str | None = None
    permission_decision: Literal["allow", "deny", "ask"] | None = None
    permission_decision_reason: str | None = None
    updated_input: dict[str, Any] | None = None


class HookAnswer(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """What a hook prints: ``{}`` when bir has nothing to say. ``system_message`` is shown to the user,
    never to the model."""

    hook_specific_output: HookSpecificOutput | None = None
    system_message: str | None = None


EMPTY_HOOK_ANSWER: Final = HookAnswer()


# -- encoding ------------------------------------------------------------------------------------------

_T = TypeVar("_T")
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
_encoder: Final = msgspec.json.Encoder()


class BodyError(ValueError):
    """A body that is not JSON, or not the route's shape. The message names the field."""


def decode(kind: type[_T], raw: bytes) -> _T:
    """``raw`` as ``kind``.

    Raises:
        BodyError: not JSON, or not the shape of ``kind`` (the message says which field, e.g. ``$.serverName``).
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(raw)  # type: ignore[no-any-return]
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BodyError(str(exc)[:300]) from None
    except RecursionError:
        raise BodyError("the JSON is nested too deeply to read") from None


def encode(value: object) -> bytes:
    """JSON bytes of a contract value (or any plain value)."""
    return _encoder.encode(value)


# -- the routes, as a table: path, method, request, answer, and how long a healthy server takes -------------

_Q = TypeVar("_Q")
_A = TypeVar("_A")


class Route(Generic[_Q, _A]):
    """One route of the control plane: a ``request`` body (``NoBody`` for a GET) and its ``answer``.

    ``timeout_s`` is what a client gives a healthy server; a route whose wait depends on the request
    (a long poll's hold, a step's timeout) adds it at the call.
    """

    __slots__ = ("answer", "method", "name", "path", "request", "timeout_s")

    def __init__(
        self, method: Literal["GET", "POST"], path: str, request: type[_Q], answer: type[_A], timeout_s: float
    ) -> None:
        self.method = method
        self.path = path
        self.name = path.lstrip("/")
        self.request = request
        self.answer = answer
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"Route({self.method} {self.path})"


class NoBody(msgspec.Struct, frozen=True):
    """The request of a route that takes none (a GET)."""


HEALTH: Final = Route("GET", "/health", NoBody, Health, 2.0)
PROXY_REGISTER: Final = Route("POST", "/proxy/register", RegisterRequest, RegisterAnswer, 5.0)
# Held by the server up to the request's hold; the client adds it.
PROXY_POLL: Final = Route("POST", "/proxy/poll", PollRequest, PollAnswer, 5.0)
PROXY_RESULT: Final = Route("POST", "/proxy/result", ResultRequest, Ok, 5.0)
# A proxy's goodbye: worth a moment, never a wait (a server that does not answer learns it from the silence).
PROXY_UNREGISTER: Final = Route("POST", "/proxy/unregister", UnregisterRequest, Ok, 1.0)
PROXY_STEP: Final = Route("POST", "/proxy/step", StepReport, Ok, 5.0)
SCENARIO_HELLO: Final = Route("POST", "/scenario/hello", Hello, Ok, 1.0)
# A direct run: bounded by ``BIR_SCENARIO_RUN_TIMEOUT_MS`` at the call.
SCENARIO_RUN: Final = Route("POST", "/scenario/run", ScenarioRunRequest, ScenarioRunAnswer, 5.0)
# One step of ``bir replay``: its own timeout plus this slack, so the server's answer says what happened.
REPLAY_CALL: Final = Route("POST", "/replay/call", ReplayCallRequest, ReplayCallAnswer, 5.0)
HOOKS: Final[dict[str, Route[HookInput, HookAnswer]]] = {
    event: Route("POST", hook.path, HookInput, HookAnswer, hook.client_s) for event, hook in HOOK_ROUTES.items()
}
ROUTES: Final[tuple[Route[Any, Any], ...]] = (
    HEALTH,
    PROXY_REGISTER,
    PROXY_POLL,
    PROXY_RESULT,
    PROXY_UNREGISTER,
    PROXY_STEP,
    SCENARIO_HELLO,
    SCENARIO_RUN,
    REPLAY_CALL,
    *HOOKS.values(),
)
