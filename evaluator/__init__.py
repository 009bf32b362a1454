"""The sandboxed logic evaluator: supervised worker processes that each hold one JS isolate.

Other parts of bir call exactly this::

    from bir.evaluator import EvaluatorPool, LogicError

    async with EvaluatorPool(workers=2, timeout_ms=1000, memory_mb=64, max_jobs=2000) as pool:
        out = await pool.evaluate("toolOutputLogic", body, tool_output_text, params, resp_params)

``bir.evaluator.walls.describe()`` says which of the kernel's walls a worker on this machine puts up
around itself (for ``bir doctor``); ``pool.walls`` says which the pool's workers did put up.

Imports are lazy so that a worker process (``bir.evaluator.worker``) loads neither asyncio's
machinery nor the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bir.core.errors import LogicError
    from bir.evaluator.pool import EvaluatorPool

__all__ = ["EvaluatorPool", "LogicError"]


def __getattr__(name: str) -> Any:
    if name == "EvaluatorPool":
        from bir.evaluator.pool import EvaluatorPool

        return EvaluatorPool
    if name == "LogicError":
        from bir.core.errors import LogicError

        return LogicError
    raise AttributeError(name)
