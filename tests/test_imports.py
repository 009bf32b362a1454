"""Imports point one way: core at the bottom, evaluator on it, hooks on both, proxy on hooks' contract.

The rule is read from the source (every ``import`` statement, lazy ones and ``TYPE_CHECKING`` ones
included), so a back-edge fails here before it becomes a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What each layer may import of bir, besides itself. The CLI (``bir.cli``) is the composition root and
# the benchmarks start whole systems: they sit above everything and may import it all.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "evaluator": frozenset({"core"}),
    "hooks": frozenset({"core", "evaluator"}),
    # A proxy speaks the control plane's contract and finds its server by discovery, nothing more.
    "proxy": frozenset({"core", "hooks.api", "hooks.discovery"}),
    # The demo upstream stands for a third-party server: it never imports bir.
    "examples": frozenset(),
}
TOP = frozenset({"cli", "benchmarks"})


def _layer_of(path: Path, root: Path) -> str:
    relative = path.relative_to(root)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _bir_imports(path: Path) -> list[str]:
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


def _violations(root: Path = REPO) -> list[str]:
    bad: list[str] = []
    for path in _package_files(root):
        layer = _layer_of(path, root)
        if layer in TOP:
            continue
        allowed = ALLOWED[layer]
        for name in _bir_imports(path):
            target = name.removeprefix("bir.")
            if target.split(".")[0] == layer or target in ("__version__",):
                continue
            if any(target == rule or target.startswith(rule + ".") for rule in allowed):
                continue
            bad.append(f"{path.relative_to(root)} imports bir.{target}")
    return sorted(set(bad))


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert _violations() == []


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
