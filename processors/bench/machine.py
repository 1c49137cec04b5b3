"""What every benchmark and live experiment records about the machine it ran on."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np


def machine_info() -> dict[str, Any]:
    """CPUs, processor, Python and numpy versions, and the date (for docs/benchmarks.md)."""
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "numpy": np.__version__,
    }
