"""``bir replay`` without a session: the command, its report, its MCP host and the direct executor.
It imports neither ``bir.hooks.session`` nor ``bir.hooks.commands``."""
