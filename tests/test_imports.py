"""Imports point one way: core at the bottom, evaluator on it, hooks on both, proxy on hooks' contract;
inside hooks, rooms by role; and no module of the product imports itself through others.

The rules are read from the source (every ``import`` statement, lazy ones and ``TYPE_CHECKING`` ones
included), so a back-edge fails here before it becomes a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What each layer may import of bir, besides itself. The CLI (``bir.cli``) is the composition root and
# the benchmarks start whole systems: they sit above everything and may import it all.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "evaluator": frozenset({"core"}),
    "hooks": frozenset({"core", "evaluator"}),
    # A proxy speaks the control plane's contract and finds its server by discovery, nothing more.
    "proxy": frozenset({"core", "hooks.api", "hooks.discovery", "hooks.control_client"}),
    # The demo upstream stands for a third-party server: it never imports bir.
    "examples": frozenset(),
}
TOP = frozenset({"cli", "benchmarks"})

# Inside hooks: what a room may not import of the other rooms. ``bir.hooks.daemon`` composes the server
# and the session; the commands sit above everything else in hooks.
ROOMS_FORBIDDEN: dict[str, frozenset[str]] = {
    "hooks.server": frozenset({"hooks.session", "hooks.replay", "hooks.commands", "hooks.daemon", "hooks.local"}),
    "hooks.session": frozenset({"hooks.commands", "hooks.replay", "hooks.daemon"}),
    "hooks.replay": frozenset({"hooks.session", "hooks.commands", "hooks.daemon", "hooks.local"}),
    # The local service stands behind the service contract: it knows nothing of the runner above it.
    "hooks.local": frozenset(
        {"hooks.server", "hooks.session", "hooks.replay", "hooks.commands", "hooks.daemon", "hooks.hook_client"}
    ),
}
# The contract, discovery, the stdlib hook-routes table and bir-hook stand alone: each may import of hooks
# only what is listed here (everything else in hooks builds on them, never the other way round).
STANDALONE: dict[str, frozenset[str]] = {
    "hooks.api": frozenset({"hooks.hook_routes"}),
    "hooks.discovery": frozenset(),
    "hooks.hook_routes": frozenset(),
    "hooks.hook_client": frozenset({"hooks.hook_routes"}),
}
# Nothing in hooks imports the commands but the commands themselves.
COMMANDS = "hooks.commands"


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _bir_imports(path: Path) -> list[str]:
    """Every ``bir.…`` name ``path`` imports, as ``bir.module`` or ``bir.module.name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.startswith("bir."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "bir":
                found.extend(f"bir.{alias.name}" for alias in node.names)
            elif node.module.startswith("bir."):
                found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _package_files(root: Path) -> list[Path]:
    files = sorted(
        path
        for folder in (*ALLOWED, "benchmarks")
        for path in (root / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    return [*files, root / "cli.py"] if (root / "cli.py").exists() else files


def _within(target: str, rule: str) -> bool:
    return target == rule or target.startswith(rule + ".")


def _violations(root: Path = REPO) -> list[str]:
    bad: list[str] = []
    for path in _package_files(root):
        module = _module_of(path, root)
        layer = module.split(".")[0]
        if layer in TOP:
            continue
        for name in _bir_imports(path):
            target = name.removeprefix("bir.")
            if target == "__version__":
                continue
            where = f"{path.relative_to(root)} imports bir.{target}"
            if target.split(".")[0] != layer:
                if not any(_within(target, rule) for rule in ALLOWED[layer]):
                    bad.append(where)
                continue
            if module in STANDALONE:
                if not _within(target, module) and not any(_within(target, ok) for ok in STANDALONE[module]):
                    bad.append(where)
                continue
            room = next((r for r in ROOMS_FORBIDDEN if _within(module, r)), None)
            if (
                room is not None
                and any(_within(target, rule) and not _within(target, room) for rule in ROOMS_FORBIDDEN[room])
            ) or (_within(target, COMMANDS) and not _within(module, COMMANDS)):
                bad.append(where)
    return sorted(set(bad))


def _graph(root: Path) -> dict[str, set[str]]:
    """Module → the product modules it imports (a ``from m import name`` counts as ``m.name`` when that
    is a module, else as ``m``)."""
    modules = {_module_of(path, root): path for path in _package_files(root)}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for imported in _bir_imports(path):
            target = imported.removeprefix("bir.")
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges[name].add(target)
    return edges


def _cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_every_package_imports_only_the_layers_below_it_and_each_room_only_what_it_may() -> None:
    assert _violations() == []


def test_no_module_of_the_product_imports_itself_through_others() -> None:
    assert _cycles(_graph(REPO)) == []


def test_the_rule_sees_a_lazy_back_edge_and_a_proxy_reaching_past_the_contract(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "plan.py").write_text(
        "def f() -> None:\n    from bir.hooks.server.control import ControlServer\n"
    )
    (tmp_path / "proxy").mkdir()
    (tmp_path / "proxy" / "relay.py").write_text(
        "from bir.hooks import api\nfrom bir.hooks.server.routes import build_app\n"
    )
    assert _violations(tmp_path) == [
        "core/plan.py imports bir.hooks.server.control.ControlServer",
        "proxy/relay.py imports bir.hooks.server.routes.build_app",
    ]


def test_the_rooms_rule_sees_the_server_reaching_the_session_and_anything_reaching_the_commands(
    tmp_path: Path,
) -> None:
    for room in ("server", "session", "replay", "commands"):
        (tmp_path / "hooks" / room).mkdir(parents=True)
    (tmp_path / "hooks" / "server" / "control.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bir.hooks.session.controller import Controller\n"
    )
    (tmp_path / "hooks" / "session" / "steer.py").write_text("from bir.hooks.commands import install\n")
    (tmp_path / "hooks" / "replay" / "command.py").write_text("from bir.hooks.session.state import Run\n")
    (tmp_path / "hooks" / "commands" / "doctor.py").write_text("from bir.hooks.session import state\n")
    (tmp_path / "hooks" / "api.py").write_text(
        "from bir.hooks import hook_routes\nfrom bir.hooks.server import routes\n"
    )
    assert _violations(tmp_path) == [
        "hooks/api.py imports bir.hooks.server.routes",
        "hooks/replay/command.py imports bir.hooks.session.state.Run",
        "hooks/server/control.py imports bir.hooks.session.controller.Controller",
        "hooks/session/steer.py imports bir.hooks.commands.install",
    ]


def test_the_cycle_check_sees_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "hooks" / "server").mkdir(parents=True)
    (tmp_path / "hooks" / "session").mkdir(parents=True)
    (tmp_path / "hooks" / "server" / "control.py").write_text(
        "def main() -> None:\n    from bir.hooks.session.host import live\n"
    )
    (tmp_path / "hooks" / "session" / "host.py").write_text("from bir.hooks.session import controller\n")
    (tmp_path / "hooks" / "session" / "controller.py").write_text("from bir.hooks.server.control import Server\n")
    assert _cycles(_graph(tmp_path)) == [["hooks.server.control", "hooks.session.controller", "hooks.session.host"]]
