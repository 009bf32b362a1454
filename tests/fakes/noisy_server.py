"""A stdio MCP server that writes lines that are not JSON-RPC (the count is its first argument) before
it answers ``initialize``, then idles until its stdin closes."""

from __future__ import annotations

import json
import sys


def main() -> None:
    line = sys.stdin.readline()
    if not line:
        return
    for n in range(int(sys.argv[1])):
        sys.stdout.write(f"starting up, step {n}\n")
    message = json.loads(line)
    result = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "noisy", "version": "0"}}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": result}) + "\n")
    sys.stdout.flush()
    for _ in sys.stdin:
        pass


if __name__ == "__main__":
    main()
