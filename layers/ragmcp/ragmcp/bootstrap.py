"""The composition root: settings -> adapters -> services. Nothing else builds adapters.

It only wires: `build_services` picks the adapters the settings name (or takes the ones it is
given, such as the in-memory fakes of tests/fakes.py) and builds the services on them. Only the
entry points (cli.py, serve.py, functions/*/app.py) import it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragmcp.domain.errors import InvalidArgument, RagError, StoreDamaged
from ragmcp.ingest.dropfolder import UPLOADS, DropFolder
from ragmcp.ingest.notes import NoteService
from ragmcp.ingest.pipeline import DocumentParser, IngestService, parse_document
from ragmcp.ingest.sources import register_folder
from ragmcp.ingest.uploads import UploadService
from ragmcp.lazy import lazy, lazy_value
from ragmcp.ports import (
    BlobStore,
    ConversationStore,
    DocumentStore,
    Embedder,
    EmbeddingCache,
    JobStore,
    Links,
    ObjectJobs,
    Reranker,
    SearchIndex,
    SourceStore,
    TaskQueue,
    UploadStore,
    UserDirectory,
)
from ragmcp.progress import Progress
from ragmcp.retrieval.catalog import Catalog
from ragmcp.retrieval.query_cache import with_query_cache
from ragmcp.retrieval.service import SearchService
from ragmcp.security.audit import AuditLog, Checkpointer
from ragmcp.security.identity import Identities, TokenVerifier
from ragmcp.security.keys import KB_MCP_KEY_ID, KeyService, ProfileKey
from ragmcp.security.links import document_url
from ragmcp.security.originals import Downloads, Originals
from ragmcp.security.ports import AuditStore, CheckpointStore, KeyStore, RateLimiter
from ragmcp.services import Services
from ragmcp.settings import AwsSettings, Settings
from ragmcp.synthesis.ports import Generator, SynthesisRunner
from ragmcp.synthesis.service import SynthesisService, SynthesisSteps
from ragmcp.synthesis.stash import PassageStash

if TYPE_CHECKING:
    import socket

    import numpy as np

    from ragmcp.adapters.aws.opensearch import OpenSearchIndex
    from ragmcp.adapters.aws.redrive import DeadLetters
    from ragmcp.adapters.aws.tasks import ObjectEventTaskQueue
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.hnsw import HnswVectors
    from ragmcp.adapters.local.recovery import Redo
    from ragmcp.domain.models import Source
    from ragmcp.ingest.chunking import Chunker
    from ragmcp.ingest.events import DropEvents
    from ragmcp.mcp.chat import ChatDeps
    from ragmcp.mcp.kb import KbDeps
    from ragmcp.mcp.mindset import MindsetDeps
    from ragmcp.mcp.proxysql import ProxysqlDeps
    from ragmcp.mcp.ragbox import RagboxDeps
    from ragmcp.mcp.registry import ToolRegistry

log = logging.getLogger(__name__)

BEDROCK_TIMEOUTS = (2, 15, 1)
"""(connect, read, attempts) of the answer model's calls: one call fits in a synthesis task (20 s)."""
EMBEDDING_TIMEOUTS = (1, 4, 2)
"""(connect, read, attempts) of an embedding call: a search's query embedding fits in the MCP function's 29 s."""
OPENSEARCH_TIMEOUT = 8
"""Seconds an OpenSearch request may take (a search, or a bulk request of 100 chunks)."""
GRAPH_FILE = "vectors.hnsw"
"""The embedded index's vector graph, in the data directory."""


def build_services(
    settings: Settings,
    adapters: Adapters | None = None,
    *,
    reindex: bool = False,
    reader: bool = False,
    first_sync: Progress | None = None,
) -> Services:
    """The services on `adapters`, else on the configured backend's. An index built with an older
    schema raises IndexOutdated, unless `reindex` (`ragmcp reindex`) asks to rebuild it first.
    `reader`: a reader process of `ragmcp serve --workers N`, whose vector graph follows the
    writer's saved one instead of growing its own. `first_sync`: the progress of the served folder's
    first sync (`ragmcp serve --docs`), which searches warn about while it runs."""
    if adapters is None:
        aws = settings.server.backend == "aws"
        adapters = _AwsParts(settings).adapters() if aws else _local_adapters(settings, reader)
    reembedded = reindex and _reembed(settings, adapters)
    embedder, reindexed = _searchable(settings, adapters.index, adapters.embedder, reindex)
    return _assemble(settings, replace(adapters, embedder=embedder), reindexed or reembedded, first_sync)


def mindset_deps(services: Services) -> MindsetDeps:
    from ragmcp.mcp.mindset import MindsetDeps

    return MindsetDeps(
        settings=services.settings, search=services.search, catalog=services.catalog, source_url=services.source_url
    )


def proxysql_deps(services: Services) -> ProxysqlDeps:
    from ragmcp.mcp.proxysql import ProxysqlDeps

    return ProxysqlDeps(
        settings=services.settings,
        search=services.search,
        catalog=services.catalog,
        sources=services.sources,
        embedder=services.embedder,
        ingest=services.ingest,
        tasks=services.tasks,
        jobs=services.jobs,
    )


def kb_deps(services: Services) -> KbDeps:
    from ragmcp.mcp.kb import KbDeps

    return KbDeps(
        settings=services.settings,
        search=services.search,
        catalog=services.catalog,
        documents=services.documents,
        jobs=services.jobs,
        notes=services.notes,
        uploads=services.uploads,
        embedder=services.embedder,
        source_url=services.source_url,
        first_sync=services.first_sync,
    )


def chat_deps(services: Services) -> ChatDeps:
    from ragmcp.mcp.chat import ChatDeps

    return ChatDeps(
        settings=services.settings,
        catalog=services.catalog,
        search=services.search,
        synthesis=services.synthesis,
        source_url=services.source_url,
        first_sync=services.first_sync,
    )


def ragbox_deps(services: Services) -> RagboxDeps:
    from ragmcp.mcp.ragbox import RagboxDeps

    return RagboxDeps(
        settings=services.settings, search=services.search, catalog=services.catalog, synthesis=services.synthesis
    )


DEPS_PROVIDERS: dict[str, Callable[[Services], object]] = {
    "MindsetDeps": mindset_deps,
    "ProxysqlDeps": proxysql_deps,
    "KbDeps": kb_deps,
    "ChatDeps": chat_deps,
    "RagboxDeps": ragbox_deps,
}
"""Each profile's dependencies (by their type's name: the MCP modules are imported only by the entry
points that serve tools), built from the services by a function of its own."""


def build_registry(services: Services) -> ToolRegistry:
    """Every profile's tools, each given its profile's dependencies (DEPS_PROVIDERS) from `services`,
    which are complete when built: the registry may be built at any time, as often as wanted."""
    from ragmcp.mcp.registry import ToolRegistry
    from ragmcp.mcp.server import tool_specs

    def provide(deps_type: type) -> object:
        provider = DEPS_PROVIDERS.get(deps_type.__name__)
        made = provider(services) if provider is not None else None
        if not isinstance(made, deps_type):
            raise TypeError(f"no provider of {deps_type.__qualname__} in bootstrap.DEPS_PROVIDERS")
        return made

    return ToolRegistry.bind(tool_specs(), provide, audit=services.audit)


@dataclass
class Adapters:
    """What one deployment plugs into the ports: `build_services` builds the services on them.

    bootstrap builds the embedded and the AWS deployment's; a test may pass its own (tests/fakes.py)."""

    index: SearchIndex
    documents: DocumentStore
    jobs: JobStore
    sources: SourceStore
    blobs: BlobStore
    embedder: Embedder
    cache: EmbeddingCache
    tasks: TaskQueue
    users: UserDirectory
    uploads: UploadStore
    conversations: ConversationStore
    keys: KeyStore
    limiter: RateLimiter
    audit: AuditStore
    audit_key: Callable[[], bytes]
    """The audit trail's HMAC key, kept outside the database (read once, on first use)."""
    checkpoints: CheckpointStore
    links: Links
    generator: Generator
    location_for: Callable[[str, str], str]
    renditions_for: Callable[[str, str], str]
    """Where the redacted renditions of a tenant's source are kept (never a watched location)."""
    staging_location: str
    remote_synthesis: SynthesisRunner | None = None
    """Runs the synthesis steps elsewhere (a state machine); in process when None."""
    passage_stash: PassageStash | None = None
    """Where caller-provided passages wait while a state machine runs the steps."""
    vector_graph: HnswVectors | None = None
    transaction: Callable[[], AbstractContextManager[object]] = field(default=nullcontext)
    """One atomic write across the index and the stores, where they share a database."""
    database: Database | None = None
    reranker: Reranker | None = None
    """Reorders the passages between retrieval and the confidence gate (Bedrock Rerank); none when None."""
    object_jobs: ObjectJobs | None = None
    """AWS: the jobs that wait for the drop bucket's change events; the services then apply those events."""
    console_secret: bytes | None = None
    """Signs the console's sessions; a fresh random key per process when None."""


def _chunker(s: Settings) -> Chunker:
    from ragmcp.ingest.chunking import Chunker
    from ragmcp.ingest.tokenizer import load_tokenizer

    return Chunker(
        load_tokenizer(),
        max_tokens=s.ingest.chunk_tokens,
        overlap=s.ingest.chunk_overlap,
        max_chars=s.ingest.chunk_max_chars,
    )


def _parser(s: Settings) -> DocumentParser:
    """The format budgets of the settings; embedded, each file parsed in a sandboxed worker process."""
    from ragmcp.ingest.limits import ParseLimits
    from ragmcp.ingest.sandbox import ParseSandbox, ProcessLimits

    i = s.ingest
    limits = ParseLimits(
        max_chars=i.parse_max_chars,
        max_inflated_bytes=i.parse_max_inflated_bytes,
        max_pages=i.parse_max_pages,
        max_ocr_pages=i.parse_max_ocr_pages,
        max_cells=i.parse_max_cells,
        max_rows=i.parse_max_rows,
        max_columns=i.parse_max_columns,
        max_tags=i.parse_max_tags,
    )
    if s.server.backend == "local" and i.parse_sandbox:
        process = ProcessLimits(i.parse_memory_mb, i.parse_cpu_seconds, i.parse_timeout_seconds)
        return ParseSandbox(limits, process, i.parse_workers)
    return functools.partial(parse_document, limits=limits)


def _searchable(s: Settings, index: SearchIndex, embedder: Embedder, reindex: bool = False) -> tuple[Embedder, bool]:
    """The embedder with its query cache, once the index is checked against it (its model, its schema:
    rebuilt when `reindex`); and whether the index was rebuilt."""
    index.ensure_model(embedder.model_id, embedder.dimension)
    reindexed = index.ensure_schema(rebuild=reindex)
    return with_query_cache(embedder, s.embedding.query_cache_size), reindexed


def _reembed(s: Settings, a: Adapters) -> bool:
    """`ragmcp reindex` on an embedded index built with another embedding model (say before
    RAGMCP_DOCUMENT_INT8 changed): its stored chunk texts embedded again with this one (the vectors
    kept in the embedding cache too), its vector graph rebuilt from them; whether it did."""
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp.ingest.pipeline import sha256_hex

    if not isinstance(a.index, SqliteSearchIndex):
        return False
    embedder, graph = a.embedder, a.vector_graph

    def embed(texts: list[str]) -> np.ndarray:
        vectors = embedder.embed(texts)
        a.cache.put_many(embedder.model_sha256, zip((sha256_hex(t.encode()) for t in texts), vectors, strict=True))
        return vectors

    def forget_graph() -> None:
        if graph is None:
            (s.server.data_dir / GRAPH_FILE).unlink(missing_ok=True)
        else:
            graph.forget()

    if not a.index.reembed(embedder.model_id, embedder.dimension, embed, forget_graph):
        return False
    if graph is not None:
        graph.catch_up()
    return True


def _ingest_service(
    s: Settings,
    a: Adapters | _AwsParts,
    embedder: Embedder,
    originals: Originals,
    transaction: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> IngestService:
    return IngestService(
        index=a.index,
        documents=a.documents,
        jobs=a.jobs,
        sources=a.sources,
        blobs=a.blobs,
        embedder=embedder,
        cache=a.cache,
        chunker=lazy(lambda: _chunker(s)),
        max_file_bytes=s.ingest.max_file_bytes,
        ocr=s.ingest.ocr,
        originals=originals,
        mass_delete_share=s.ingest.mass_delete_share,
        transaction=transaction,
        parser=_parser(s),
    )


def _synthesis_steps(s: Settings, a: Adapters | _AwsParts, search: SearchService, embedder: Embedder) -> SynthesisSteps:
    links = a.links
    return SynthesisSteps(
        search=search,
        embedder=embedder,
        generator=a.generator,
        link=lambda principal, hit: document_url(links, principal, hit.document, hit.chunk.page_start),
        search_defaults=s.search.defaults(),
        threshold=s.synthesis.silence_threshold,
        midpoint=s.synthesis.confidence_midpoint,
        steepness=s.synthesis.confidence_steepness,
        stash=a.passage_stash,
        coverage_weight=s.synthesis.confidence_coverage_weight,
        reranker=a.reranker,
    )


def _upload_service(s: Settings, a: Adapters | _AwsParts, drop: Callable[[], DropFolder]) -> UploadService:
    """Uploads; a finished upload goes to the drop folder `drop()` gives (made on first use: the janitor,
    which only removes expired sessions, never makes it)."""
    return UploadService(
        uploads=a.uploads,
        blobs=a.blobs,
        tasks=a.tasks,
        staging_location=a.staging_location,
        deliver=lambda principal, name, data, tags, owner: drop().put(
            principal, UPLOADS, name, data, tags, owner=owner
        ),
        check_replace=lambda principal, name: drop().check_write(principal, UPLOADS, name),
        max_upload_bytes=s.ingest.max_upload_bytes,
        max_part_bytes=s.ingest.max_part_bytes,
        ttl_seconds=s.ingest.upload_ttl_seconds,
    )


def _drop_events(s: Settings, a: Adapters | _AwsParts, drop: DropFolder, waiting: ObjectJobs) -> DropEvents:
    from ragmcp.ingest.events import DropEvents

    sources, blobs, pk_column = a.sources, a.blobs, s.ingest.row_pk_column
    return DropEvents(
        blobs=blobs,
        sources=sources,
        drop=drop,
        waiting=waiting,
        register=lambda tenant, source_id, folder: register_folder(
            sources, blobs, tenant, source_id, folder, pk_column=pk_column
        ),
    )


def _assemble(s: Settings, a: Adapters, reindexed: bool, first_sync: Progress | None = None) -> Services:
    """The services on the adapters (their index checked against their embedder by `_searchable`): only
    wiring, no I/O."""
    originals = Originals(a.blobs, a.sources, a.renditions_for)
    ingest = _ingest_service(s, a, a.embedder, originals, a.transaction)
    search = SearchService(a.index, a.embedder)
    drop = DropFolder(blobs=a.blobs, sources=a.sources, ingest=ingest, location_for=a.location_for)
    steps = _synthesis_steps(s, a, search, a.embedder)
    synthesis = SynthesisService(
        runner=a.remote_synthesis or steps,
        conversations=a.conversations,
        conversation_ttl_seconds=s.synthesis.conversation_ttl_seconds,
    )
    keys = KeyService(a.keys, s.security.key_env)
    kb_key = s.security.kb_mcp_api_key
    profile_key = (
        ProfileKey(kb_key.get_secret_value(), key_id=KB_MCP_KEY_ID, profile="kb", tenant=s.server.tenant)
        if kb_key is not None
        else None
    )
    identities = Identities(
        keys, a.users, s.server.tenant, tokens=_token_verifier(s), open_access=s.security.open, profile_key=profile_key
    )
    audit = _audit_log(s, a.audit, a.audit_key, a.checkpoints)
    drop_events = _drop_events(s, a, drop, a.object_jobs) if a.object_jobs is not None else None
    secret = {"console_secret": a.console_secret} if a.console_secret is not None else {}
    return Services(
        settings=s,
        index=a.index,
        documents=a.documents,
        jobs=a.jobs,
        sources=a.sources,
        blobs=a.blobs,
        embedder=a.embedder,
        ingest=ingest,
        search=search,
        links=a.links,
        catalog=Catalog(index=a.index, documents=a.documents, sources=a.sources, blobs=a.blobs, parser=ingest.parser),
        tasks=a.tasks,
        users=a.users,
        drop=drop,
        uploads=_upload_service(s, a, lambda: drop),
        notes=NoteService(drop, a.documents, a.tasks),
        synthesis=synthesis,
        synthesis_steps=steps,
        keys=keys,
        identities=identities,
        limiter=a.limiter,
        audit=audit,
        originals=originals,
        downloads=Downloads(a.links, identities, a.documents, originals, audit),
        vector_graph=a.vector_graph,
        database=a.database,
        reindexed=reindexed,
        drop_events=drop_events,
        first_sync=first_sync,
        **secret,
    )


def _local_adapters(s: Settings, reader: bool = False) -> Adapters:
    """The embedded default: one SQLite database, local files, the ONNX embedder."""
    from ragmcp.adapters.local.database import Database, fts_tokenizer
    from ragmcp.adapters.local.files import LocalBlobStore
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.adapters.local.ratelimit import SqliteRateLimiter
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex, built_with, shared_columns
    from ragmcp.adapters.local.sqlite_stores import (
        SqliteConversationStore,
        SqliteDocumentStore,
        SqliteEmbeddingCache,
        SqliteJobStore,
        SqliteKeyStore,
        SqliteSourceStore,
        SqliteUploadStore,
        SqliteUserDirectory,
    )
    from ragmcp.adapters.local.tasks import ThreadTaskQueue
    from ragmcp.adapters.openai_compat import OpenAICompatibleGenerator
    from ragmcp.security.links import LinkSigner, load_or_create_secret
    from ragmcp.synthesis.generators import ExtractiveGenerator

    db = Database(s.server.db_path)
    audit, checkpoints, audit_key = _local_audit(s, db)
    embedder = _onnx_embedder(s, built_with(db))
    graph = _vector_graph(s, db, embedder.dimension, reader)
    jobs = SqliteJobStore(db)
    generator = (
        OpenAICompatibleGenerator(s.synthesis.generator_url, s.synthesis.generator_model, s.synthesis.generator_api_key)
        if s.synthesis.generator_url
        else ExtractiveGenerator(embedder)
    )
    return Adapters(
        index=SqliteSearchIndex(
            db,
            graph,
            TermPostings(s.index.postings_cache_entries, shared_columns(db, fts_tokenizer(s.index.fts_stemming)))
            if s.index.postings_cache_entries
            else None,
            s.index.vector_exact_below,
            fts_tokenizer(s.index.fts_stemming),
        ),
        documents=SqliteDocumentStore(db),
        jobs=jobs,
        sources=SqliteSourceStore(db),
        blobs=LocalBlobStore(),
        embedder=embedder,
        cache=SqliteEmbeddingCache(Database(s.embedding.embedding_cache) if s.embedding.embedding_cache else db),
        tasks=ThreadTaskQueue(jobs),
        users=SqliteUserDirectory(db),
        uploads=SqliteUploadStore(db),
        conversations=SqliteConversationStore(db),
        keys=SqliteKeyStore(db),
        limiter=SqliteRateLimiter(s.server.data_dir / "ratelimits.db"),
        audit=audit,
        audit_key=audit_key,
        checkpoints=checkpoints,
        links=LinkSigner(
            load_or_create_secret(s.server.data_dir / "signing.key"), s.server.base_url, s.server.link_ttl_seconds
        ),
        generator=generator,
        location_for=lambda tenant, source_id: str(s.server.data_dir / "sources" / tenant / source_id),
        renditions_for=lambda tenant, source_id: str(s.server.data_dir / "renditions" / tenant / source_id),
        staging_location=str(s.server.data_dir / "staging"),
        vector_graph=graph,
        transaction=db.write,
        database=db,
        console_secret=load_or_create_secret(s.server.data_dir / "console.key"),
    )


def start_local(settings: Settings, first_sync: Progress | None = None) -> tuple[Services, list[Redo]]:
    """The checks and recovery every long-running command does before its work: its data directory
    private (0700; each file in it is created 0600), the database and vector graph sound (or a
    refusal naming `ragmcp doctor`), then the unfinished jobs of dead processes marked interrupted.
    Returns the services and the files to redo."""
    from ragmcp.adapters.local.recovery import DataDirLock, recover
    from ragmcp.adapters.local.sqlite_stores import SqliteJobStore
    from ragmcp.doctor import startup_findings

    settings.server.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    findings = startup_findings(settings)
    if findings:
        raise StoreDamaged(f"{findings[0].problem}; fix: {findings[0].fix}; `ragmcp doctor` checks everything")
    lock = DataDirLock(settings.server.data_dir)
    services = build_services(settings, first_sync=first_sync)
    assert services.database is not None
    return services, recover(SqliteJobStore(services.database), lock)


@dataclass
class WriterWorkers:
    """The background workers of `ragmcp serve`'s writer process beside its HTTP server: the upload
    janitor, the redo of interrupted writes, the folder watcher, the reader processes and the state
    published for them. `workers` are the ones /healthz reports on (the HTTP app adds its own)."""

    janitor: Any
    recovery: Any
    watcher: Any
    pool: Any
    publisher: Any
    workers: list[Any]

    def start(self) -> None:
        for worker in (self.janitor, self.recovery, self.watcher, self.pool, self.publisher):
            if worker is not None:
                worker.start()

    def stop(self) -> None:
        for worker in (self.janitor, self.watcher, self.publisher, self.pool):
            if worker is not None:
                worker.stop()


def build_writer_workers(
    services: Services,
    redo: list[Redo],
    *,
    source: Source | None,
    watch_changes: bool,
    allow_mass_delete: bool,
    on_synced: Callable[[], None],
    listener: socket.socket,
    reader: Callable[[socket.socket, int, int, Any], None],
) -> WriterWorkers:
    """`ragmcp serve`'s writer's workers (started by WriterWorkers.start): the folder `source` watched
    when given, and `services.settings.server.workers - 1` reader processes running `reader` on
    `listener` (serve.serve_reader) when more than one is asked for."""
    from ragmcp.adapters.local.janitor import Janitor
    from ragmcp.adapters.local.recovery import RedoWorker
    from ragmcp.adapters.local.watcher import FolderWatcher
    from ragmcp.adapters.local.workers import WRITER_STATE_FILE, ReaderPool, WriterState

    settings = services.settings
    jobs = services.jobs
    janitor = Janitor(services.uploads, settings.ingest.sweep_interval_seconds)
    workers: list[Any] = [janitor, services.tasks]
    recovery = RedoWorker(services.ingest, services.sources, redo, jobs) if redo else None
    watcher = None
    if source is not None:
        watcher = FolderWatcher(
            services.ingest,
            source,
            watch_changes=watch_changes,
            allow_mass_delete=allow_mass_delete,
            on_synced=on_synced,
            sync=services.first_sync,
        )
    workers += [w for w in (recovery, watcher) if w is not None]
    pool = publisher = None
    if settings.server.workers > 1:
        pool = ReaderPool(
            reader,
            listener,
            settings.server.workers - 1,
            after=services.first_sync,
            on_death=functools.partial(_redo_dead_reader, services, jobs, workers),
        )
        publisher = WriterState(
            settings.server.data_dir / WRITER_STATE_FILE,
            functools.partial(_writer_state, services, workers, watcher, pool),
        )
        workers += [pool, publisher]
    return WriterWorkers(janitor, recovery, watcher, pool, publisher, workers)


def _writer_state(services: Services, workers: list[Any], watcher: Any, pool: Any) -> dict[str, Any]:
    """What the writer's /healthz says that a reader's cannot know: published for the readers."""
    return {
        "ingest": watcher.health(services.sources) if watcher is not None else None,
        "readers": pool.status(),
        "problems": [p for w in workers if (p := w.problem())],
    }


def _redo_dead_reader(services: Services, jobs: Any, workers: list[Any], pid: int) -> None:
    """The writes a reader that died had accepted, redone in the background by the writer."""
    from ragmcp.adapters.local.recovery import RedoWorker, recover_dead_process

    redo = recover_dead_process(jobs, pid)
    if redo:
        recovery = RedoWorker(services.ingest, services.sources, redo, jobs)
        recovery.start()
        workers.append(recovery)


def build_http_app(
    services: Services,
    workers: list[Any],
    role: dict[str, object],
    *,
    watcher: Any = None,
    pool: Any = None,
    writer_state: Any = None,
) -> tuple[Any, list[Any]]:
    """The HTTP app of a `ragmcp serve` process over `services`, and its own workers (the vector graph's
    and the index warmer, added to `workers`, the ones its /healthz reports on): the caller starts them
    before serving and stops them after."""
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp.adapters.local.warmer import IndexWarmer
    from ragmcp.http import create_app
    from ragmcp.web.state import ServeState

    graph = services.vector_graph
    warmer = IndexWarmer(services.index) if isinstance(services.index, SqliteSearchIndex) else None
    own = [w for w in (graph, warmer) if w is not None]
    workers += own
    serve = ServeState(
        watcher=watcher,
        vector_graph=graph,
        warmer=warmer,
        workers=workers,
        worker=role,
        pool=pool,
        writer_state=writer_state,  # a reader's: the writer's published state, for its /healthz
    )
    return create_app(services, build_registry(services), serve), own


def _local_audit(s: Settings, db: Database) -> tuple[AuditStore, CheckpointStore, Callable[[], bytes]]:
    """The embedded audit trail: its records in the database, its checkpoints and key in files beside it."""
    from ragmcp.adapters.local.checkpoints import FileCheckpointStore
    from ragmcp.adapters.local.sqlite_stores import SqliteAuditStore

    audit = SqliteAuditStore(db)
    checkpoints = FileCheckpointStore(s.server.data_dir / "audit-checkpoints.jsonl")
    return audit, checkpoints, lazy_value(lambda: _local_audit_key(s.server.data_dir / "audit.key", audit, checkpoints))


def _audit_log(s: Settings, store: AuditStore, key: Callable[[], bytes], checkpoints: CheckpointStore) -> AuditLog:
    return AuditLog(store, key, Checkpointer(checkpoints, key, s.security.audit_checkpoint_seconds))


def _local_audit_key(path: Path, store: AuditStore, checkpoints: CheckpointStore) -> bytes:
    """The audit key file, created (0600) with the first record; a trail whose key is gone is an
    error, not a reason to start a new key that would make every earlier record look forged."""
    from ragmcp.security.links import load_or_create_secret

    if not path.exists() and (store.tenants() or next(iter(checkpoints.all()), None) is not None):
        raise RagError(f"the audit key {path} is missing but the audit trail is not empty: restore it from a backup")
    return load_or_create_secret(path)


def _vector_graph(s: Settings, db: Database, dimension: int, follow: bool) -> HnswVectors | None:
    """The HNSW graph the settings ask for, or None; also None (with a warning) on an index whose
    chunk ids may be reused, which a graph labelled by chunk id cannot follow. With reader
    processes beside it, the writer's graph looks for their writes every few seconds (they cannot
    wake it), and a reader's looks for a newer saved graph every ten."""
    if not s.index.vector_graph:
        return None
    from ragmcp.adapters.local.hnsw import HnswParams, HnswVectors

    if not db.autoincrement("chunks"):
        log.warning("index %s predates stable chunk ids: vector search stays exact (re-ingest to change)", db.path)
        return None
    params = HnswParams(
        dimension, s.index.hnsw_m, s.index.hnsw_ef_construction, s.index.hnsw_ef_search, vectors=s.index.hnsw_vectors
    )
    idle = 10 if follow else (5 if s.server.workers > 1 else 60)
    return HnswVectors(db, s.server.data_dir / GRAPH_FILE, params, follow=follow, idle_seconds=idle)


class _AwsParts:
    """The AWS deployment's adapters: DynamoDB, S3, OpenSearch, Bedrock, Step Functions, the drop bucket's
    events; each made on first use, so a function builds (and imports) only the ones it uses.

    `search_backend` sqlite and `embedder` onnx put the embedded index and embedder under these
    stores instead (where no OpenSearch or Bedrock is reachable, as in the emulator tests).
    """

    def __init__(self, s: Settings):
        import boto3
        from botocore.config import Config

        self.s = s
        self.session = boto3.session.Session()
        self.config = Config(retries={"mode": "standard", "max_attempts": 5})

    def table(self, name: str) -> Any:
        return self.dynamodb.Table(name)

    @functools.cached_property
    def dynamodb(self) -> Any:
        return self.session.resource("dynamodb", config=self.config)

    @functools.cached_property
    def s3(self) -> Any:
        from botocore.config import Config

        return self.session.client("s3", config=self.config.merge(Config(signature_version="s3v4")))  # SigV4 links

    @functools.cached_property
    def embedder(self) -> Embedder:
        return _aws_embedder(self.s, self.session, self.config)

    @functools.cached_property
    def index(self) -> SearchIndex:
        return build_search_index(self.s, self.table(self.s.aws.documents_table), self.session.region_name)

    @functools.cached_property
    def documents(self) -> DocumentStore:
        from ragmcp.adapters.aws.dynamodb import DynamoDocumentStore

        return DynamoDocumentStore(self.table(self.s.aws.documents_table))

    @functools.cached_property
    def jobs(self) -> JobStore:
        from ragmcp.adapters.aws.dynamodb import DynamoJobStore

        return DynamoJobStore(self.table(self.s.aws.jobs_table))

    @functools.cached_property
    def blobs(self) -> BlobStore:
        from ragmcp.adapters.aws.s3 import S3BlobStore

        return S3BlobStore(self.s3)

    @functools.cached_property
    def sources(self) -> SourceStore:
        from ragmcp.adapters.aws.dynamodb import DynamoSourceStore

        return DynamoSourceStore(self.table(self.s.aws.catalog_table))

    @functools.cached_property
    def cache(self) -> EmbeddingCache:
        from ragmcp.adapters.aws.dynamodb import DynamoEmbeddingCache

        return DynamoEmbeddingCache(self.table(self.s.aws.embedding_cache_table))

    @functools.cached_property
    def tasks(self) -> ObjectEventTaskQueue:
        """The task queue, which is also the jobs that wait for the drop bucket's change events."""
        from ragmcp.adapters.aws.tasks import ObjectEventTaskQueue

        sqs = lazy(lambda: self.session.client("sqs", config=self.config))
        return ObjectEventTaskQueue(self.jobs, self.table(self.s.aws.jobs_table), sqs, self.s.aws.ingest_queue_url)

    @functools.cached_property
    def users(self) -> UserDirectory:
        from ragmcp.adapters.aws.dynamodb import DynamoUserDirectory

        return DynamoUserDirectory(self.table(self.s.aws.catalog_table))

    @functools.cached_property
    def uploads(self) -> UploadStore:
        from ragmcp.adapters.aws.dynamodb import DynamoUploadStore

        return DynamoUploadStore(self.table(self.s.aws.uploads_table))

    @functools.cached_property
    def conversations(self) -> ConversationStore:
        from ragmcp.adapters.aws.dynamodb import DynamoConversationStore

        return DynamoConversationStore(self.table(self.s.aws.conversations_table))

    @functools.cached_property
    def keys(self) -> KeyStore:
        from ragmcp.adapters.aws.dynamodb import DynamoKeyStore

        return DynamoKeyStore(self.table(self.s.aws.keys_table))

    @functools.cached_property
    def limiter(self) -> RateLimiter:
        from ragmcp.adapters.aws.dynamodb import DynamoRateLimiter

        return DynamoRateLimiter(self.table(self.s.aws.rate_limits_table), self.s.aws.concurrency_lease_seconds)

    @functools.cached_property
    def audit(self) -> AuditStore:
        from ragmcp.adapters.aws.dynamodb import DynamoAuditStore

        return DynamoAuditStore(self.table(self.s.aws.audit_table))

    @functools.cached_property
    def audit_key(self) -> Callable[[], bytes]:
        from ragmcp.adapters.aws.audit import secrets_manager_key

        return lazy_value(
            lambda: secrets_manager_key(
                self.session.client("secretsmanager", config=self.config), self.s.aws.audit_key_secret
            )
        )

    @functools.cached_property
    def checkpoints(self) -> CheckpointStore:
        from ragmcp.adapters.aws.audit import S3CheckpointStore

        return S3CheckpointStore(self.s3, self.s.aws.audit_archive_bucket)

    @functools.cached_property
    def links(self) -> Links:
        from ragmcp.adapters.aws.s3 import S3Links

        originals = Originals(self.blobs, self.sources, self.renditions_for)
        return S3Links(self.blobs, originals, self.s.server.link_ttl_seconds, self.session.get_credentials)

    @functools.cached_property
    def generator(self) -> Generator:
        return _aws_generator(self.s, self.session, self.config, self.embedder)

    def location_for(self, tenant: str, source_id: str) -> str:
        from ragmcp.adapters.aws.s3 import s3_location
        from ragmcp.ingest.events import source_key

        return s3_location(self.s.aws.drop_bucket, source_key(tenant, source_id))

    def renditions_for(self, tenant: str, source_id: str) -> str:
        from ragmcp.adapters.aws.s3 import s3_location
        from ragmcp.ingest.events import RENDITIONS_PREFIX

        return s3_location(self.s.aws.drop_bucket, f"{RENDITIONS_PREFIX}{tenant}/{source_id}")

    @functools.cached_property
    def staging_location(self) -> str:
        from ragmcp.adapters.aws.s3 import s3_location

        return s3_location(self.s.aws.drop_bucket, "staging")

    @functools.cached_property
    def passage_stash(self) -> PassageStash:
        return PassageStash(self.blobs, self.staging_location)

    @functools.cached_property
    def remote_synthesis(self) -> SynthesisRunner | None:
        if not self.s.aws.synthesis_state_machine_arn:
            return None
        from ragmcp.adapters.aws.stepfunctions import StepFunctionsRunner, sfn_client

        sfn = lazy(lambda: sfn_client(self.session))
        arn = self.s.aws.synthesis_state_machine_arn
        return StepFunctionsRunner(sfn, arn, _aws_generator_id(self.s), self.passage_stash)

    @functools.cached_property
    def reranker(self) -> Reranker | None:
        return _aws_reranker(self.s, self.session, self.config) if self.s.search.rerank else None

    def adapters(self) -> Adapters:
        secret = self.s.security.console_secret
        return Adapters(
            index=self.index,
            documents=self.documents,
            jobs=self.jobs,
            sources=self.sources,
            blobs=self.blobs,
            embedder=self.embedder,
            cache=self.cache,
            tasks=self.tasks,
            users=self.users,
            uploads=self.uploads,
            conversations=self.conversations,
            keys=self.keys,
            limiter=self.limiter,
            audit=self.audit,
            audit_key=self.audit_key,
            checkpoints=self.checkpoints,
            links=self.links,
            generator=self.generator,
            location_for=self.location_for,
            renditions_for=self.renditions_for,
            staging_location=self.staging_location,
            remote_synthesis=self.remote_synthesis,
            passage_stash=self.passage_stash,
            reranker=self.reranker,
            object_jobs=self.tasks,
            console_secret=secret.get_secret_value().encode() if secret is not None else None,
        )


DROP_EVENTS_SETTINGS = ("server", "ingest", "embedding", "index", "aws")
"""The settings groups build_drop_events reads (the ingest function loads these alone: load_groups)."""


def build_drop_events(s: Settings) -> DropEvents:
    """The ingest function's: the drop bucket's change events applied to the index (and what they use:
    the index, the stores, the embedder; no key, audit, synthesis or MCP part)."""
    if s.server.backend != "aws":
        raise RagError("the ingest function needs RAGMCP_BACKEND=aws")
    parts = _AwsParts(s)
    embedder, _ = _searchable(s, parts.index, parts.embedder)
    ingest = _ingest_service(s, parts, embedder, Originals(parts.blobs, parts.sources, parts.renditions_for))
    drop = DropFolder(blobs=parts.blobs, sources=parts.sources, ingest=ingest, location_for=parts.location_for)
    return _drop_events(s, parts, drop, parts.tasks)


SYNTHESIS_STEPS_SETTINGS = ("server", "embedding", "search", "index", "synthesis", "aws")
"""The settings groups build_synthesis_steps reads (the synthesis function loads these alone)."""


def build_synthesis_steps(s: Settings) -> SynthesisSteps:
    """The synthesis function's: the steps the state machine runs (search, generator, links)."""
    parts = _AwsParts(s)
    embedder, _ = _searchable(s, parts.index, parts.embedder)
    return _synthesis_steps(s, parts, SearchService(parts.index, embedder), embedder)


UPLOAD_JANITOR_SETTINGS = ("ingest", "aws")
"""The settings groups build_upload_janitor reads (the janitor function loads these alone)."""


def build_upload_janitor(s: Settings) -> UploadService:
    """The janitor function's: the uploads, to remove expired sessions and their staged parts (a finished
    upload's drop folder is never made: the janitor finishes none)."""
    parts = _AwsParts(s)

    @functools.cache
    def drop() -> DropFolder:
        embedder, _ = _searchable(s, parts.index, parts.embedder)
        ingest = _ingest_service(s, parts, embedder, Originals(parts.blobs, parts.sources, parts.renditions_for))
        return DropFolder(blobs=parts.blobs, sources=parts.sources, ingest=ingest, location_for=parts.location_for)

    return _upload_service(s, parts, drop)


OPERATOR_SETTINGS = ("server", "security", "aws")
"""The settings groups Operator reads (the operator's commands load these alone)."""


class Operator:
    """What the operator's commands (`ragmcp keys | users | audit | connect --key`) use, on this machine's
    index or a deployed stack's tables: each part made on first use; no embedder, index check, search or
    MCP part."""

    def __init__(self, s: Settings):
        self.settings = s
        self._aws = _AwsParts(s) if s.server.backend == "aws" else None

    @functools.cached_property
    def database(self) -> Database | None:
        """The embedded index's database (None on AWS)."""
        from ragmcp.adapters.local.database import Database

        return Database(self.settings.server.db_path) if self._aws is None else None

    @functools.cached_property
    def keys(self) -> KeyService:
        from ragmcp.adapters.local.sqlite_stores import SqliteKeyStore

        store = self._aws.keys if self._aws is not None else SqliteKeyStore(self.database)
        return KeyService(store, self.settings.security.key_env)

    @functools.cached_property
    def users(self) -> UserDirectory:
        from ragmcp.adapters.local.sqlite_stores import SqliteUserDirectory

        return self._aws.users if self._aws is not None else SqliteUserDirectory(self.database)

    @functools.cached_property
    def documents(self) -> DocumentStore:
        from ragmcp.adapters.local.sqlite_stores import SqliteDocumentStore

        return self._aws.documents if self._aws is not None else SqliteDocumentStore(self.database)

    @functools.cached_property
    def audit(self) -> AuditLog:
        if self._aws is not None:
            return _audit_log(self.settings, self._aws.audit, self._aws.audit_key, self._aws.checkpoints)
        assert self.database is not None
        store, checkpoints, key = _local_audit(self.settings, self.database)
        return _audit_log(self.settings, store, key, checkpoints)


DEAD_LETTERS_SETTINGS = ("aws",)
"""The settings group build_dead_letters reads."""


def build_dead_letters(s: Settings) -> DeadLetters:
    """The ingest queue's dead letters (the operator's `ragmcp jobs redrive`)."""
    import boto3

    from ragmcp.adapters.aws.redrive import DeadLetters

    if not (s.aws.ingest_queue_url and s.aws.ingest_dead_letter_queue_url):
        raise InvalidArgument(
            "set RAGMCP_INGEST_QUEUE_URL and RAGMCP_INGEST_DEAD_LETTER_QUEUE_URL (the stack's IngestQueueUrl and "
            "IngestDeadLetterQueueUrl outputs)"
        )
    return DeadLetters(
        boto3.session.Session().client("sqs"), s.aws.ingest_dead_letter_queue_url, s.aws.ingest_queue_url
    )


def _token_verifier(s: Settings) -> TokenVerifier | None:
    """OAuth access tokens are accepted when an issuer is configured (security/oauth.py)."""
    if not s.security.oauth_issuer:
        return None
    from ragmcp.security.oauth import JwtVerifier

    return JwtVerifier.from_settings(s)


def _onnx_embedder(s: Settings, built_with: str | None = None) -> Embedder:
    """The ONNX embedder. With RAGMCP_DOCUMENT_INT8 unset, documents are embedded with the int8 copy
    unless `built_with`, the model id of the index's vectors (None: it has none yet), is another:
    a start never refuses an index because that default changed."""
    from ragmcp.adapters.local.onnx_embedder import MODEL_ID_DYNAMIC_INT8, OnnxEmbedder

    int8 = s.embedding.document_int8
    if int8 is None:
        int8 = built_with is None or built_with.startswith(MODEL_ID_DYNAMIC_INT8)
    return OnnxEmbedder(
        max_tokens=s.embedding.embed_max_tokens,
        batch_size=s.embedding.embed_batch,
        workers=s.embedding.embed_workers,
        quantized_queries=s.embedding.model_cache if s.embedding.query_int8 or int8 else None,
        quantized_documents=int8,
        query_batch=s.embedding.query_batch,
        fused_attention=s.embedding.query_fused_attention,
    )


def _aws_embedder(s: Settings, session: Any, config: Any) -> Embedder:
    if s.aws.embedder == "onnx":  # an OpenSearch index is not re-embedded: float documents unless asked
        from ragmcp.adapters.local.onnx_embedder import MODEL_ID

        return _onnx_embedder(s, MODEL_ID)
    from botocore.config import Config

    from ragmcp.adapters.aws.bedrock import BedrockEmbedder

    connect, read, attempts = EMBEDDING_TIMEOUTS
    retries = {"mode": "standard", "max_attempts": attempts}
    timeouts = Config(connect_timeout=connect, read_timeout=read, retries=retries)
    client = session.client("bedrock-runtime", config=config.merge(timeouts))
    return BedrockEmbedder(client, s.aws.embedding_model_id, s.aws.embedding_dimension, s.aws.bedrock_concurrency)


def _aws_generator_id(s: Settings) -> str:
    return s.synthesis.generation_model_id if s.aws.generator == "bedrock" else "extractive"


def _aws_generator(s: Settings, session: Any, config: Any, embedder: Embedder) -> Generator:
    from botocore.config import Config

    if s.aws.generator == "extractive":
        from ragmcp.synthesis.generators import ExtractiveGenerator

        return ExtractiveGenerator(embedder)
    from ragmcp.adapters.aws.bedrock import BedrockGenerator

    connect, read, attempts = BEDROCK_TIMEOUTS
    retries = {"mode": "standard", "max_attempts": attempts}
    timeouts = Config(connect_timeout=connect, read_timeout=read, retries=retries)
    client = lazy(lambda: session.client("bedrock-runtime", config=config.merge(timeouts)))
    return BedrockGenerator(client, s.synthesis.generation_model_id, s.synthesis.generation_max_tokens)


def _aws_reranker(s: Settings, session: Any, config: Any) -> Reranker:
    from ragmcp.adapters.aws.bedrock import BedrockReranker

    region = session.region_name
    arn = (
        f"arn:{session.get_partition_for_region(region)}:bedrock:{region}::foundation-model/{s.search.rerank_model_id}"
    )
    return BedrockReranker(lazy(lambda: session.client("bedrock-agent-runtime", config=config)), arn)


def build_search_index(s: Settings, documents_table: Any, region: str | None) -> SearchIndex:
    """The AWS deployment's search index."""
    if s.aws.search_backend == "sqlite":
        from ragmcp.adapters.local.database import Database, fts_tokenizer
        from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex

        return SqliteSearchIndex(Database(s.server.db_path), tokenizer=fts_tokenizer(s.index.fts_stemming))
    return build_opensearch_index(s.aws, documents_table, region)


def build_opensearch_index(aws: AwsSettings, documents_table: Any, region: str | None) -> OpenSearchIndex:
    """The OpenSearch index of the AWS settings (also all the index setup custom resource needs)."""
    from ragmcp.adapters.aws.ledger import DynamoChunkLedger
    from ragmcp.adapters.aws.opensearch import OpenSearchIndex, opensearch_client

    if not aws.opensearch_endpoint:
        raise ValueError("search_backend opensearch needs RAGMCP_OPENSEARCH_ENDPOINT")
    service = aws.opensearch_service if aws.opensearch_sigv4 else None
    client = opensearch_client(aws.opensearch_endpoint, region, service, timeout=OPENSEARCH_TIMEOUT)
    ledger = DynamoChunkLedger(documents_table)
    return OpenSearchIndex(client, aws.opensearch_index, ledger, serverless=aws.opensearch_service == "aoss")
