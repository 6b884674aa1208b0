"""A child process's lifetime tied to its parent's."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
