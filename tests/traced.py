"""Memory a call allocated and kept, as tracemalloc sees it, counting only allocations made under one
module: tracemalloc traces every thread, and in the whole suite earlier tests leave threads (servers,
emulators, loggers) that allocate while the call runs."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from types import ModuleType


def kept_under(module: ModuleType, call: Callable[[], object]) -> int:
    """Bytes allocated during `call` by code of `module` (anywhere in the allocation's stack) and
    still held after it returned and garbage was collected."""
    mine = [tracemalloc.Filter(True, module.__file__, all_frames=True)]
    gc.collect()
    tracemalloc.start(64)
    try:
        before = tracemalloc.take_snapshot().filter_traces(mine)
        call()
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(mine)
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))
