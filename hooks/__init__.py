"""The control server that Claude Code hooks and the proxies call, and its work queue."""
