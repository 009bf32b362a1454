"""A writer process for the store's tests: records runs and books tickets in a loop, saying each commit.

``python -m tests.hooks.local.store_writer DB NAME COUNT`` writes COUNT runs (each with two steps and a
finish) and, for each, tries to book the shared tickets ``tkt_0``…; after each committed write it prints
one line (``run <id>`` or ``booked <ticket>``) and flushes, so the parent knows what was acknowledged.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bir.hooks.local.store import Store


def main() -> None:
    path, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = Store(path)
    for i in range(count):
        run_id = f"run_{name}_{i}"
        store.create_run(run_id, project="/p", input=f"prompt {i} " + "x" * 200)
        store.add_step(run_id, 0, "Read", {"stepIndex": 0, "toolName": "Read", "toolOutput": "y" * 500})
        store.add_step(run_id, 1, "Bash", {"stepIndex": 1, "toolName": "Bash", "toolOutput": "z" * 500})
        store.finish_run(run_id, {"output": "done"})
        sys.stdout.write(f"run {run_id}\n")
        sys.stdout.flush()
        ticket = f"tkt_{i % 50}"
        if (
            store.book(
                ticket, "scn_shared", outcome="steered_full", ledger="savings", measured=True, report={"by": name}
            )
            == "booked"
        ):
            sys.stdout.write(f"booked {ticket}\n")
            sys.stdout.flush()
    store.close()


if __name__ == "__main__":
    main()
