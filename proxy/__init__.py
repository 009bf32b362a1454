"""Everything that speaks MCP over stdio: bir-proxy and bir-scenario."""
