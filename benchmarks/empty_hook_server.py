"""The least an ``mcp_tool`` hook can cost: a stdio MCP server whose one tool, ``hook``, answers ``{}``.

``bir bench pin``'s whole session runs it as the ``mcp_hooks`` variant's hook server: what Claude Code
itself spends on an ``mcp_tool`` hook (a ``tools/call`` to a connected server), with no work behind it.

Usage: ``python -m bir.benchmarks.empty_hook_server``.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

SERVER_NAME: Final = "empty"
TOOL_NAME: Final = "hook"


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tool = types.Tool(name=TOOL_NAME, description="benchmark hook: answers {}", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool])


async def _call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], is_error=False)


async def serve() -> None:
    """Serve on this process's stdin and stdout until stdin closes."""
    server: Server[Any] = Server(SERVER_NAME, on_list_tools=_list_tools, on_call_tool=_call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(serve)
