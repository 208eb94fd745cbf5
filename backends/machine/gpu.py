"""Whether this machine has a CUDA GPU that torch can use, asked without importing torch."""

from __future__ import annotations

import importlib.util
import os
import sys


def cuda_available() -> bool:
    """Ask torch in a cheap way: only if the parent already imported it, or via nvidia's device nodes."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    return os.path.exists("/dev/nvidiactl") and importlib.util.find_spec("torch") is not None
