"""Claude Code's hook events as the control plane routes them (spec §10): one table, standard library only.

``bir-hook`` (which must start fast and import nothing heavy) and the control server's vocabulary
(``bir.hooks.api``) both read it, so a route's path and its three deadlines are written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple


class HookRoute(NamedTuple):
    """Where one event posts, and how long each party gives it."""

    path: str
    # The timeout ``bir install`` writes for the hook: Claude Code kills the hook past it.
    timeout_s: int
    # The control server's own deadline for answering it, well inside the hook's timeout.
    answered_by_ms: int
    # ``bir-hook``'s deadline for the whole exchange: past the server's (its overdue answer still
    # arrives), under the hook's, so Claude Code never has to kill the hook.
    client_s: float


# The field bir adds to a hook's body (Claude Code never sends it): the session's host, ``bir.core.host``.
HOST_PID_FIELD: Final = "bir_host_pid"

HOOK_ROUTES: Final[Mapping[str, HookRoute]] = {
    "SessionStart": HookRoute("/session/start", 10, 2_000, 3.0),
    "UserPromptSubmit": HookRoute("/session/prompt", 10, 7_000, 8.5),
    "PreToolUse": HookRoute("/tool/pre", 15, 12_000, 13.5),
    "PostToolUse": HookRoute("/tool/post", 5, 2_000, 3.5),
    "PostToolUseFailure": HookRoute("/tool/failure", 5, 2_000, 3.5),
    "Stop": HookRoute("/session/stop", 5, 2_000, 3.5),
    "SessionEnd": HookRoute("/session/end", 5, 2_000, 3.5),
}
