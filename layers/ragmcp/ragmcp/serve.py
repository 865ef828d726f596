"""`ragmcp serve`'s processes: the writer (its checks, listening socket, watched folder, workers and reader
processes, started through bootstrap's factories) and each reader of `serve --workers N`, answering HTTP on
the one listening socket; with the checks and lines `ragmcp ingest` and `ragmcp stdio` share (the folder
served or ingested, what the index holds). cli.py parses the arguments and calls `serve`."""

from __future__ import annotations

import functools
import gc
import ipaddress
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragmcp.domain.errors import InvalidArgument
from ragmcp.logs import configure_text
from ragmcp.progress import Progress, announce
from ragmcp.settings import Settings

if TYPE_CHECKING:
    from ragmcp.domain.models import Source
    from ragmcp.services import Services

log = logging.getLogger("ragmcp")


class Refused(Exception):
    """Why `ragmcp serve` did not start (one line; nothing was changed): the command prints it and exits 2."""


def serve(settings: Settings, *, replace: bool, no_watch: bool, allow_mass_delete: bool) -> None:
    """Run `ragmcp serve`'s writer process until it is stopped: its checks (each refusal raised as
    Refused before anything is changed), the listening socket, the folder it ingests and watches, its
    workers and reader processes, and the HTTP server."""
    from ragmcp.adapters.local.recovery import WriterLock
    from ragmcp.bootstrap import build_writer_workers, start_local

    refusal = serve_refusal(settings)
    if refusal is not None:
        raise Refused(refusal)
    writer = WriterLock(settings.server.data_dir)  # held (its descriptor open) until the process exits
    holder = writer.acquire()
    if holder is not None:
        raise Refused(
            f"another `ragmcp serve` (pid {holder}) is the writer of {settings.server.data_dir}; "
            f"nothing was changed. Stop it first (kill {holder}), or serve another folder with its own data "
            "directory: `ragmcp --data-dir <dir> serve --docs <folder>`"
        )
    first_sync = Progress("files") if settings.server.docs is not None else None
    services, redo = start_local(settings, first_sync)
    if settings.security.open:
        log.warning(
            "--open: serving WITHOUT authentication on %s (loopback only): a request without a key acts as "
            "tenant %r with every scope",
            settings.server.host,
            settings.server.tenant,
        )
    else:
        try:
            active = services.identities.profile_key is not None or services.keys.any_active()
        except Exception as exc:  # the key store cannot be read: an error, never an open door
            raise Refused(f"the API key store cannot be read ({type(exc).__name__}: {exc})") from exc
        if not active:
            raise Refused(
                f"no active API key in {settings.server.db_path}: create one with "
                "`ragmcp keys create --tenant default`, or pass --open to serve without authentication "
                "on 127.0.0.1 (to try ragmcp)"
            )
    try:
        listener = listen(settings.server.host, settings.server.port)
    except OSError as exc:
        raise Refused(f"cannot listen on {settings.server.host}:{settings.server.port}: {exc.strerror}") from exc
    source = replaced = None
    if settings.server.docs is not None:
        source, replaced = folder_source(services, settings, settings.server.docs, replace)
    background = build_writer_workers(
        services,
        redo,
        source=source,
        watch_changes=settings.server.watch and not no_watch,
        allow_mass_delete=allow_mass_delete or bool(replaced),
        on_synced=lambda: log.info("ready: %s", holdings(services, settings)),
        listener=listener,
        reader=functools.partial(serve_reader, settings),
    )
    background.start()
    if background.watcher is not None:
        log.info(
            "ingesting and watching %s as source %r of tenant %r (data directory %s)",
            settings.server.docs.resolve(),
            settings.server.source,
            settings.server.tenant,
            settings.server.data_dir.resolve(),
        )
        announce(background.watcher.status.sync, log.info)
    else:
        log.info("ready: %s", holdings(services, settings))
    role = {"role": "writer", "number": 0, "pid": os.getpid(), "workers": settings.server.workers}
    try:
        turns = None if background.pool is None else background.pool.turns
        _serve_http(
            services, listener, background.workers, role, watcher=background.watcher, pool=background.pool, turns=turns
        )
    finally:
        background.stop()


def folder_source(services: Services, settings: Settings, folder: Path, replace: bool) -> tuple[Source, bool]:
    """The source of the folder served or ingested, and whether it replaced the folder the source
    read before (only with --replace; without it, a source reading another folder is refused)."""
    from ragmcp.ingest.sources import folder_switch

    tenant, source_id, location = settings.server.tenant, settings.server.source, str(folder.resolve())
    switch = folder_switch(services.sources, services.documents, services.blobs, tenant, source_id, location)
    if switch is not None:
        if not replace:
            raise InvalidArgument(switch.refusal())
        log.warning("%s", switch.notice())
    return services.register_folder(tenant, source_id, location), switch is not None


def serve_reader(settings: Settings, listener: socket.socket, number: int, writer: int, turns: Any = None) -> None:
    """A reader process of `ragmcp serve --workers N` (started by the writer's ReaderPool): it
    answers requests on the writer's socket until asked to stop, or until the writer is gone."""
    import signal
    import threading

    from ragmcp.adapters.local.recovery import DataDirLock
    from ragmcp.adapters.local.workers import WRITER_STATE_FILE, read_writer_state
    from ragmcp.bootstrap import build_services

    configure_text(False)
    DataDirLock(settings.server.data_dir).acquire()  # shared beside the writer: no recovery while we run

    def watch_writer() -> None:
        while os.getppid() == writer:
            time.sleep(1)
        log.warning("reader %d: the writer (pid %d) is gone; stopping", number, writer)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_writer, name="writer-watch", daemon=True).start()
    services = build_services(settings, reader=True)
    role = {"role": "reader", "number": number, "pid": os.getpid(), "workers": settings.server.workers}
    state = functools.partial(read_writer_state, settings.server.data_dir / WRITER_STATE_FILE)
    _serve_http(services, listener, [services.tasks], role, writer_state=state, turns=turns)


def _serve_http(
    services: Services,
    listener: socket.socket,
    workers: list[Any],
    role: dict[str, object],
    *,
    watcher: Any = None,
    pool: Any = None,
    writer_state: Any = None,
    turns: Any = None,
) -> None:
    """Answer HTTP on `listener` until stopped: the app over `services`, with the vector graph's
    worker and the index warmer of this process; `workers` are the ones /healthz reports on.
    `turns`: the accept turns shared by the processes of `serve --workers N` (ReaderPool.turns)."""
    from ragmcp.bootstrap import build_http_app
    from ragmcp.web.connections import AcceptTurns, GuardedServer

    app, own = build_http_app(services, workers, role, watcher=watcher, pool=pool, writer_state=writer_state)
    for worker in own:
        worker.start()
    log.info("%s %s serving MCP on %s/mcp", role["role"], role["pid"], services.settings.server.base_url)
    # What the process made to start (modules, the app, the SDK's and our models' schemas) lives until
    # it exits: frozen out of the collector's way, the collections that requests' garbage triggers
    # walk only what was made since.
    gc.collect()
    gc.freeze()
    try:
        accept_turns = None if turns is None else AcceptTurns(turns, int(str(role["number"])))
        GuardedServer(http_config(app, services.settings), accept_turns).run(sockets=[listener])
    finally:
        listener.close()
        for worker in own:
            worker.stop()


def http_config(app: Any, settings: Settings) -> Any:
    """uvicorn's configuration: its h11 protocol bounded by ragmcp.web.connections (header and body
    timeouts, a cap on open connections and an accept backlog below the open files limit, raised
    here to the hard limit), and its log records passed to ours (repeated ones limited: ragmcp.logs)."""
    import uvicorn

    from ragmcp.web.connections import ConnectionLimits, connection_budget, guarded_protocol, raise_open_files_limit

    server = settings.server
    cap, backlog = connection_budget(server.max_connections, raise_open_files_limit())
    limits = ConnectionLimits(server.header_timeout_seconds, server.body_timeout_seconds, cap)
    protocol = guarded_protocol(limits)
    return uvicorn.Config(app, log_level="warning", log_config=None, http=protocol, backlog=backlog)


def serve_refusal(settings: Settings) -> str | None:
    """Why `ragmcp serve` must not start with these settings (one line), or None."""
    if settings.security.open and not is_loopback(settings.server.host):
        return (
            f"refusing --open on {settings.server.host}: a server without authentication listens on loopback only "
            "(127.0.0.1 or ::1); create a key with `ragmcp keys create --tenant T` to listen beyond it"
        )
    if settings.security.open and settings.security.kb_mcp_api_key is not None:
        return (
            "KB_MCP_API_KEY is set, so the kb profile requires its Bearer token, and --open (RAGMCP_OPEN) asks for no "
            "authentication: unset one of them"
        )
    if settings.server.backend != "local":
        return "`ragmcp serve` runs the embedded server (RAGMCP_BACKEND=local); the AWS backend runs on Lambda"
    if settings.server.docs is not None:
        return folder_problem(settings.server.docs)
    return None


def folder_problem(folder: Path) -> str | None:
    """Why a folder cannot be served or ingested (one line), or None when it can be read."""
    if not folder.exists():
        return f"no such folder: {folder} (nothing was changed)"
    if not folder.is_dir():
        return f"not a folder: {folder} (nothing was changed)"
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except OSError as exc:
        return f"cannot read the folder {folder}: {exc.strerror} (nothing was changed)"
    return None


def holdings(services: Services, settings: Settings) -> str:
    """Where the index is and what it holds for the tenant served: `<data dir>: N documents in tenant T`."""
    count = services.documents.count(settings.server.tenant)
    data_dir = settings.server.data_dir.resolve()
    line = f"{data_dir}: {count} documents in tenant {settings.server.tenant!r}"
    if not count:
        line += f" (no documents yet: `ragmcp --data-dir {data_dir} ingest <folder>` adds some)"
    return line


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, taken before anything is indexed, so a port in use is said
    at once; uvicorn serves on it. Made as a TCP socket by name: asyncio turns Nagle's algorithm
    off only on connections whose protocol says TCP, and with it on, a response written in two
    parts waits for the client's delayed ACK on a kept-alive connection (40 ms a request)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
