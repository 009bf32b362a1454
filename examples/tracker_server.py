"""A second demo upstream, of another shape than ``fleet``: a stdio MCP server named ``tracker`` (an issue
tracker and its build pipelines) with fixed, deterministic data.

Where ``fleet`` answers JSON text in a content block, ``tracker`` answers the way many servers do now:

- ``search_issues {project, status?}``: ``structuredContent`` ``{"issues": [{key, title, priority, ageDays,
  assignee}]}`` with the same JSON as text content, highest priority first is *not* promised (id order);
- ``get_issue {key}``: one issue with its description and comments, structured; an unknown key is a tool
  error result;
- ``list_builds {pipeline}``: plain text, one build a line: ``<id> <status> <branch> <minutes>m``, newest
  first;
- ``build_log {build}``: the build's log as plain text;
- ``oncall {team}``: who is on call, structured ``{team, primary, secondary}``.

Like ``fleet`` it depends on the MCP SDK only and never imports ``bir``. With ``TRACKER_CALL_LOG`` set to a
file, each call is appended to it as a JSON line (``{tool, arguments}``).

Run it as ``python -m bir.examples.tracker_server``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

PROJECTS: dict[str, int] = {"WEB": 6, "API": 4, "OPS": 1, "DATA": 3, "MOBILE": 5}
PIPELINES: tuple[str, ...] = ("web-deploy", "api-ci", "nightly-etl", "mobile-release")
TEAMS: dict[str, tuple[str, str]] = {
    "payments": ("alice", "bob"),
    "platform": ("carol", "dave"),
    "search": ("erin", "frank"),
    "mobile": ("grace", "heidi"),
}
_PEOPLE = ("alice", "bob", "carol", "dave", "erin", "frank", "grace")
_STATUSES = ("passed", "failed", "passed", "running", "passed")


def _issues() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for project, count in PROJECTS.items():
        rows = []
        for i in range(count):
            n += 1
            rows.append(
                {
                    "key": f"{project}-{100 + i * 7 + n}",
                    "title": f"{project.lower()} issue {i + 1}",
                    # 41 is coprime with 97, so the priorities of one project are distinct.
                    "priority": (n * 41) % 97,
                    "ageDays": (n * 13) % 60 + 1,
                    "assignee": _PEOPLE[n % len(_PEOPLE)],
                    "status": "closed" if n % 5 == 0 else "open",
                }
            )
        out[project] = rows
    return out


ISSUES: dict[str, list[dict[str, Any]]] = _issues()
_BY_KEY: dict[str, dict[str, Any]] = {row["key"]: row for rows in ISSUES.values() for row in rows}


def _builds() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    n = 0
    for pipeline in PIPELINES:
        rows = []
        for i in range(5):
            n += 1
            rows.append(
                {
                    "id": f"b{4000 + n * 17}",
                    "status": _STATUSES[(n + i) % len(_STATUSES)],
                    "branch": "main" if i % 2 == 0 else f"feature-{n}",
                    "minutes": (n * 7) % 23 + 2,
                }
            )
        out[pipeline] = rows
    return out


BUILDS: dict[str, list[dict[str, Any]]] = _builds()
_BUILD: dict[str, tuple[str, dict[str, Any]]] = {b["id"]: (p, b) for p, rows in BUILDS.items() for b in rows}


def search_issues(project: str, status: str | None = None) -> list[dict[str, Any]]:
    """The issues of ``project`` (of ``status`` when given), in key order, without their status field."""
    rows = ISSUES.get(project.upper(), [])
    picked = [r for r in rows if status is None or r["status"] == status]
    return [{k: v for k, v in r.items() if k != "status"} for r in picked]


def issue(key: str) -> dict[str, Any]:
    """One issue with its description and comments.

    Raises:
        ToolError: no issue has this key.
    """
    row = _BY_KEY.get(key)
    if row is None:
        raise ToolError(f"no issue {key[:100]!r}")
    return {
        **row,
        "description": f"What {row['title']} is about.",
        "comments": [{"author": row["assignee"], "text": "looking into it"}],
    }


def builds_text(pipeline: str) -> str:
    """The builds of ``pipeline``, newest first, one a line."""
    rows = BUILDS.get(pipeline)
    if rows is None:
        raise ToolError(f"no pipeline {pipeline[:100]!r}")
    return "\n".join(f"{b['id']} {b['status']} {b['branch']} {b['minutes']}m" for b in rows)


def build_log(build: str) -> str:
    found = _BUILD.get(build)
    if found is None:
        raise ToolError(f"no build {build[:100]!r}")
    pipeline, row = found
    return f"build {build} of {pipeline} on {row['branch']}: {row['status']} after {row['minutes']} minutes\n"


def oncall(team: str) -> dict[str, str]:
    found = TEAMS.get(team.lower())
    if found is None:
        raise ToolError(f"no team {team[:100]!r}")
    return {"team": team.lower(), "primary": found[0], "secondary": found[1]}


def _record_call(tool: str, **arguments: Any) -> None:
    path = os.environ.get("TRACKER_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


def _structured(value: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(value))], structured_content=value)


def build_server() -> MCPServer:
    """The ``tracker`` server with its five tools."""
    server = MCPServer("tracker", version="1.0.0", log_level="WARNING")

    @server.tool(name="search_issues", description="Search a project's issues, optionally by status (open, closed).")
    def search(project: str, status: str | None = None) -> CallToolResult:
        _record_call("search_issues", project=project, status=status)
        return _structured({"issues": search_issues(project, status)})

    @server.tool(description="Read one issue with its description and comments.")
    def get_issue(key: str) -> CallToolResult:
        _record_call("get_issue", key=key)
        return _structured(issue(key))

    @server.tool(description="The builds of a pipeline, newest first: one '<id> <status> <branch> <minutes>m' a line.")
    def list_builds(pipeline: str) -> CallToolResult:
        _record_call("list_builds", pipeline=pipeline)
        return CallToolResult(content=[TextContent(type="text", text=builds_text(pipeline))])

    @server.tool(description="One build's log, as text.", structured_output=False)
    def get_build_log(build: str) -> str:
        _record_call("build_log", build=build)
        return build_log(build)

    @server.tool(description="Who is on call for a team.")
    def who_is_oncall(team: str) -> CallToolResult:
        _record_call("oncall", team=team)
        return _structured(oncall(team))

    return server


def main() -> None:
    """Serve ``tracker`` on stdin/stdout until stdin closes."""
    build_server().run("stdio")


if __name__ == "__main__":
    main()
