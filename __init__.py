"""bir: calculated replay for Claude Code.

Subpackages: ``bir.core`` (pure replay logic, configuration, CLI), ``bir.evaluator`` (the sandboxed
logic evaluator), ``bir.proxy`` (MCP over stdio) and ``bir.hooks`` (the control server).
"""

__version__ = "0.1.0"
