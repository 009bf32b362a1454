"""What a tool does with its input, judged from its name (spec §7 and §13.2).

The pin guard and the injection guard must agree on which tools *run* their input (a shell
command, an SQL statement, a query), so both read it from here. Names are split into words in any
naming convention (``run_query``, ``executeSql``, ``db-shell``, ``RunSQLQuery``) before they are
judged, so a word hidden inside another (``subquery_count``) is not mistaken for one.
"""

from __future__ import annotations

import re
from typing import Final

from bir.core.types import parse_qualified_name

SHELL_TOOLS: Final = frozenset({"Bash", "PowerShell"})
FILE_WRITE_TOOLS: Final = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
FILE_READ_TOOLS: Final = frozenset({"Read", "Grep", "Glob", "LS", "NotebookRead"})

# Words that name a tool or server whose input is executed somewhere.
_RUN_WORDS: Final = frozenset(
    {
        "query",
        "queries",
        "statement",
        "statements",
        "exec",
        "execute",
        "shell",
        "bash",
        "sh",
        "zsh",
        "powershell",
        "pwsh",
        "terminal",
        "command",
        "commands",
        "cmd",
    }
)
# Words that name a shell rather than a query language: their statements are compared as commands.
_SHELL_WORDS: Final = frozenset(
    {"shell", "bash", "sh", "zsh", "powershell", "pwsh", "terminal", "command", "commands", "cmd"}
)
_POWERSHELL_WORDS: Final = frozenset({"powershell", "pwsh"})

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def name_words(name: str) -> tuple[str, ...]:
    """Split a name written in any convention into lower-case words.

    ``executeSql`` → ``("execute", "sql")``, ``RunSQLQuery`` → ``("run", "sql", "query")``,
    ``db-shell`` → ``("db", "shell")``.
    """
    return tuple(part.lower() for part in _PARTS.findall(name[:500]))


def _is_query_language(word: str) -> bool:
    # sql, psql, mysql, postgresql, graphql, jql, sparql...: every query language ends in "ql".
    return word.endswith("ql") or word.startswith("sqlite")


def _mcp_words(tool_name: str) -> tuple[str, ...] | None:
    mcp = parse_qualified_name(tool_name)
    if mcp is None:
        return None
    server, tool = mcp
    return name_words(server) + name_words(tool)


def input_is_run(tool_name: str) -> bool:
    """True for a tool whose input is executed: ``Bash``, ``PowerShell``, or an MCP tool or server
    named for SQL, queries, ``exec``, a statement, a command or a shell.
    """
    if tool_name in SHELL_TOOLS:
        return True
    words = _mcp_words(tool_name)
    if words is None:
        return False
    return any(w in _RUN_WORDS or _is_query_language(w) for w in words)


def names_query_language(tool_name: str) -> bool:
    """True for an MCP tool or server named for a query language or queries (``executeSql``, ``run_query``)."""
    words = _mcp_words(tool_name)
    return words is not None and any(_is_query_language(w) or w in ("query", "queries") for w in words)


def runs_shell(tool_name: str) -> bool:
    """True when a run tool's statements are shell commands rather than queries.

    A name that mentions a query language wins over one that mentions a shell (``exec_sql_command``
    runs SQL).
    """
    if tool_name in SHELL_TOOLS:
        return True
    words = _mcp_words(tool_name)
    if words is None or names_query_language(tool_name):
        return False
    return any(w in _SHELL_WORDS for w in words)


def runs_powershell(tool_name: str) -> bool:
    """True for ``PowerShell`` and MCP tools named for it (its cmdlets are case-insensitive)."""
    if tool_name == "PowerShell":
        return True
    words = _mcp_words(tool_name)
    return words is not None and any(w in _POWERSHELL_WORDS for w in words)


def writes_file(tool_name: str) -> bool:
    """True for the built-in tools that write a file (``Edit``, ``MultiEdit``, ``Write``, ``NotebookEdit``)."""
    return tool_name in FILE_WRITE_TOOLS


def reads_files(tool_name: str) -> bool:
    """True for the read-only built-in file tools (``Read``, ``Grep``, ``Glob``, ``LS``, ``NotebookRead``)."""
    return tool_name in FILE_READ_TOOLS
