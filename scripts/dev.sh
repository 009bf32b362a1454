#!/usr/bin/env bash
# One entry point for a fresh machine: `setup`, `main` (setup, then the main job), `test` (setup, then checks).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev]"
}

main_job() {
    # Replay the direct fleet scenario: the plan's logic in the evaluator pool, its two MCP steps through
    # an in-process control server and a bir-proxy wrapping the demo fleet server.
    "$VENV/bin/bir" replay --scenario examples/scenarios/fleet-direct.json \
        --prompt "find the riskiest device in eu-west-1 and show its details" \
        --param region=eu-west-1 \
        --wrap "fleet=$VENV/bin/python -m bir.examples.fleet_server"
}

checks() {
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    "$VENV/bin/mypy" -p bir
    "$VENV/bin/mypy" --explicit-package-bases tests benchmarks examples
    "$VENV/bin/python" -m pytest "$@"
}

cmd="${1:-test}"
shift || true
case "$cmd" in
    setup) setup ;;
    main) setup; main_job ;;
    test) setup; checks "$@" ;;
    *) echo "usage: scripts/dev.sh setup|main|test [pytest args]" >&2; exit 2 ;;
esac
