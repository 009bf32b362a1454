"""Facts for the pure parts of ``bir status`` and ``bir doctor``, built by hand."""

from __future__ import annotations

from bir.hooks.commands.switches import ReplayView


def replay_view_of(
    *,
    replay: bool,
    allow: tuple[str, ...] | None,
    wrapped: tuple[str, ...] = (),
    installed: bool = True,
    bir_server: bool = True,
) -> ReplayView:
    return ReplayView(
        project="/p",
        installed=installed,
        stored_replay=replay,
        stored_allow=allow,
        env_replay_off=False,
        env_allow=None,
        bir_server=bir_server,
        wrapped=wrapped,
    )
