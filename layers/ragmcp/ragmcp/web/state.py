"""What a `ragmcp serve` process runs beside its HTTP app, for /healthz, the console's overview and
the app's shutdown: attached once by bootstrap.build_http_app (`create_app(..., serve=...)`). A bare
app, as the tests and the Lambda function make it, has none of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServeState:
    watcher: Any = None
    """The watched folders' FolderWatcher (the writer's), whose `health` /healthz reports."""
    vector_graph: Any = None
    """The vector graph's builder, whose `status` /healthz reports."""
    warmer: Any = None
    """The index warmer, whose `status` /healthz reports."""
    workers: list[Any] = field(default_factory=list)
    """The background workers whose `problem()` makes /healthz unhealthy."""
    worker: dict[str, object] | None = None
    """This process's role among the serving processes, as /healthz says it."""
    pool: Any = None
    """The writer's reader processes: reported by /healthz, stopped with the app."""
    writer_state: Callable[[], dict[str, Any]] | None = None
    """A reader's: the writer's published state (ingest, readers, problems), for its /healthz."""
