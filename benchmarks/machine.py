"""What a bench report says about the machine it ran on: CPUs, Python, and the load before and after.

The load is the figure that explains a noisy run on a shared VM, so every report carries it the same way.
"""

from __future__ import annotations

import os
import platform
from typing import Any


def machine_facts(load_before: tuple[float, float, float], **extra: Any) -> dict[str, Any]:
    """The report's ``machine`` block; ``extra`` adds what one bench knows besides (the V8 version, ...)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **extra,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
