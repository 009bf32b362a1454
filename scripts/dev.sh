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
    # The whole loop with no account, in a temporary BIR_HOME (bir demo): a first prompt recorded through
    # bir's hooks and a bir-proxy over the demo fleet server, its scenario calculated and self-checked on
    # the local service, a second prompt with another region matched by slot and run directly, booked.
    "$VENV/bin/bir" demo "$@"
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
    main) setup; main_job "$@" ;;
    test) setup; checks "$@" ;;
    *) echo "usage: scripts/dev.sh setup|main [--keep|--json]|test [pytest args]" >&2; exit 2 ;;
esac
