"""The choice of a worker's V8 engine: the fast private-surface one, or the public-API one.

Apart from both engines so that neither imports the other (the public engine is built on the fast one).
"""

from __future__ import annotations

from bir.evaluator.engine import bounded
from bir.evaluator.engine_v8 import V8Engine, init_v8, private_surface_gap
from bir.evaluator.engine_v8_public import PublicV8Engine


def make_v8_engine(memory_mb: int, surface: str = "auto") -> V8Engine:
    """The V8 engine of a worker: the fast private-surface engine, or the public-API one when
    ``surface`` is "public" or the private surface is missing (``engine.fallback`` says why)."""
    init_v8(memory_mb)
    if surface == "public":
        return PublicV8Engine(memory_mb, why="forced by BIR_LOGIC_ENGINE_SURFACE=public")
    gap = private_surface_gap()
    if gap is None:
        try:
            return V8Engine(memory_mb)
        except (AttributeError, TypeError, ImportError) as exc:
            gap = f"mini-racer's private surface failed: {type(exc).__name__}: {bounded(str(exc), 200)}"
    return PublicV8Engine(memory_mb, why=gap)
