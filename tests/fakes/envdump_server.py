"""A tiny stdio MCP server that writes the names of its environment variables to the file named by
its first argument, then answers ``initialize`` and idles until its stdin closes. A second argument,
a count, makes it write that many lines that are not JSON-RPC before its answer (a noisy start)."""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    line = sys.stdin.readline()
    if not line:
        return
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(sorted(os.environ), handle)
    for n in range(int(sys.argv[2]) if len(sys.argv) > 2 else 0):
        sys.stdout.write(f"starting up, step {n}\n")
    message = json.loads(line)
    result = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "envdump", "version": "0"}}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": result}) + "\n")
    sys.stdout.flush()
    for _ in sys.stdin:
        pass


if __name__ == "__main__":
    main()
