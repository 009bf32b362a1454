"""Exit statuses, one spelling for every command and console script of bir."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
# Refused, stopped or failed (the message says what to do next); status and doctor: something is broken.
EXIT_FAILED: Final = 1
# Usage: a bad option, scenario or ``BIR_*`` value.
EXIT_USAGE: Final = 2
# ``bir replay``: a target parameter has no value.
EXIT_MISSING_TARGET: Final = 3
# ``bir-proxy``: the upstream command could not be started (the shell's own status for it).
EXIT_SPAWN_FAILED: Final = 127
# Interrupted (Ctrl-C), as a shell reports SIGINT.
EXIT_INTERRUPTED: Final = 130
