"""The kernel's name of the calling thread (Linux's /proc/<pid>/task/<tid>/comm) set to its Python
name, so that a profiler or `ragmcp bench scale` can tell which thread spent what CPU.

Python before 3.14 leaves every thread it starts named after the process; onnxruntime's and the
event loop's threads are told apart from the code's own pools only by these names."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

_PR_SET_NAME = 15
_COMM_BYTES = 15
"""The kernel keeps 16 bytes of a thread's name, the last a NUL."""


def _prctl() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def name_native_thread(name: str | None = None) -> None:
    """Give the calling thread `name` (default: its Python name), cut to 15 bytes, as its kernel
    name; nothing where the platform has no prctl."""
    if _PRCTL is None:
        return
    raw = (name or threading.current_thread().name).encode("ascii", "replace")[:_COMM_BYTES]
    _PRCTL(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0)  # type: ignore[operator]
