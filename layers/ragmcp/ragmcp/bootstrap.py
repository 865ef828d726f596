"""The composition root: settings -> adapters -> services. Nothing else builds adapters.

It only wires: `build_services` picks the adapters the settings name (or takes the ones it is
given, such as the in-memory fakes of tests/fakes.py) and builds the services on them. Only the
entry points (cli.py, functions/*/app.py) import it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragmcp.domain.errors import InvalidArgument, RagError
from ragmcp.ingest.dropfolder import UPLOADS, DropFolder
from ragmcp.ingest.notes import NoteService
from ragmcp.ingest.pipeline import DocumentParser, IngestService, parse_document
from ragmcp.ingest.uploads import UploadService
from ragmcp.lazy import lazy, lazy_value
from ragmcp.mcp.registry import ToolRegistry
from ragmcp.mcp.server import tool_specs
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
from ragmcp.settings import Settings
from ragmcp.synthesis.ports import Generator, SynthesisRunner
from ragmcp.synthesis.service import SynthesisService, SynthesisSteps
from ragmcp.synthesis.stash import PassageStash

if TYPE_CHECKING:
    from ragmcp.adapters.aws.redrive import DeadLetters
    from ragmcp.adapters.local.database import Database
    from ragmcp.adapters.local.hnsw import HnswVectors
    from ragmcp.ingest.chunking import Chunker

log = logging.getLogger(__name__)

BEDROCK_TIMEOUTS = (2, 15, 1)
"""(connect, read, attempts) of the answer model's calls: one call fits in a synthesis task (20 s)."""
EMBEDDING_TIMEOUTS = (1, 4, 2)
"""(connect, read, attempts) of an embedding call: a search's query embedding fits in the MCP function's 29 s."""
OPENSEARCH_TIMEOUT = 8
"""Seconds an OpenSearch request may take (a search, or a bulk request of 100 chunks)."""


def build_services(
    settings: Settings, adapters: Adapters | None = None, *, reindex: bool = False, reader: bool = False
) -> Services:
    """The services on `adapters`, else on the configured backend's. An index built with an older
    schema raises IndexOutdated, unless `reindex` (`ragmcp reindex`) asks to rebuild it first.
    `reader`: a reader process of `ragmcp serve --workers N`, whose vector graph follows the
    writer's saved one instead of growing its own."""
    if adapters is not None:
        return _assemble(settings, adapters, reindex)
    if settings.server.backend == "aws":
        return _aws_services(settings, reindex)
    return _local_services(settings, reindex, reader)


def build_registry(services: Services) -> ToolRegistry:
    """Every profile's tools, each given its profile's dependencies from `services`: a dependency
    object's fields are named as the services it takes."""

    def provide(deps_type: type) -> object:
        return deps_type(**{f.name: getattr(services, f.name) for f in dataclasses.fields(deps_type)})

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


def _assemble(s: Settings, a: Adapters, reindex: bool) -> Services:
    a = replace(a, embedder=with_query_cache(a.embedder, s.embedding.query_cache_size))
    a.index.ensure_model(a.embedder.model_id, a.embedder.dimension)
    reindexed = a.index.ensure_schema(rebuild=reindex)
    originals = Originals(a.blobs, a.sources, a.renditions_for)
    ingest = IngestService(
        index=a.index,
        documents=a.documents,
        jobs=a.jobs,
        sources=a.sources,
        blobs=a.blobs,
        embedder=a.embedder,
        cache=a.cache,
        chunker=lazy(lambda: _chunker(s)),
        max_file_bytes=s.ingest.max_file_bytes,
        ocr=s.ingest.ocr,
        originals=originals,
        mass_delete_share=s.ingest.mass_delete_share,
        transaction=a.transaction,
        parser=_parser(s),
    )
    search = SearchService(a.index, a.embedder)
    drop = DropFolder(blobs=a.blobs, sources=a.sources, ingest=ingest, location_for=a.location_for)
    steps = SynthesisSteps(
        search=search,
        embedder=a.embedder,
        generator=a.generator,
        link=lambda principal, hit: document_url(a.links, principal, hit.document, hit.chunk.page_start),
        search_defaults=s.search.defaults(),
        threshold=s.synthesis.silence_threshold,
        midpoint=s.synthesis.confidence_midpoint,
        steepness=s.synthesis.confidence_steepness,
        stash=a.passage_stash,
        coverage_weight=s.synthesis.confidence_coverage_weight,
        reranker=a.reranker,
    )
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
    audit = AuditLog(
        a.audit, a.audit_key, Checkpointer(a.checkpoints, a.audit_key, s.security.audit_checkpoint_seconds)
    )
    services = Services(
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
        uploads=UploadService(
            uploads=a.uploads,
            blobs=a.blobs,
            tasks=a.tasks,
            staging_location=a.staging_location,
            deliver=lambda principal, name, data, tags, owner: drop.put(
                principal, UPLOADS, name, data, tags, owner=owner
            ),
            check_replace=lambda principal, name: drop.check_write(principal, UPLOADS, name),
            max_upload_bytes=s.ingest.max_upload_bytes,
            max_part_bytes=s.ingest.max_part_bytes,
            ttl_seconds=s.ingest.upload_ttl_seconds,
        ),
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
    )
    if a.object_jobs is not None:
        from ragmcp.ingest.events import DropEvents

        services.drop_events = DropEvents(
            blobs=a.blobs, sources=a.sources, drop=drop, waiting=a.object_jobs, register=services.register_folder
        )
    if a.console_secret is not None:
        services.console_secret = a.console_secret
    return services


def _local_services(s: Settings, reindex: bool, reader: bool = False) -> Services:
    """The embedded default: one SQLite database, local files, the ONNX embedder."""
    from ragmcp.adapters.local.checkpoints import FileCheckpointStore
    from ragmcp.adapters.local.database import Database, fts_tokenizer
    from ragmcp.adapters.local.files import LocalBlobStore
    from ragmcp.adapters.local.postings import TermPostings
    from ragmcp.adapters.local.ratelimit import SqliteRateLimiter
    from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex
    from ragmcp.adapters.local.sqlite_stores import (
        SqliteAuditStore,
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
    audit = SqliteAuditStore(db)
    checkpoints = FileCheckpointStore(s.server.data_dir / "audit-checkpoints.jsonl")
    embedder = _onnx_embedder(s)
    graph = _vector_graph(s, db, embedder.dimension, reader)
    jobs = SqliteJobStore(db)
    generator = (
        OpenAICompatibleGenerator(s.synthesis.generator_url, s.synthesis.generator_model, s.synthesis.generator_api_key)
        if s.synthesis.generator_url
        else ExtractiveGenerator(embedder)
    )
    return _assemble(
        s,
        Adapters(
            index=SqliteSearchIndex(
                db,
                graph,
                TermPostings(s.index.postings_cache_entries) if s.index.postings_cache_entries else None,
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
            audit_key=lazy_value(lambda: _local_audit_key(s.server.data_dir / "audit.key", audit, checkpoints)),
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
        ),
        reindex,
    )


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
    return HnswVectors(db, s.server.data_dir / "vectors.hnsw", params, follow=follow, idle_seconds=idle)


def _aws_services(s: Settings, reindex: bool) -> Services:
    """The AWS deployment: DynamoDB, S3, OpenSearch, Bedrock, Step Functions, the drop bucket's events.

    `search_backend` sqlite and `embedder` onnx put the embedded index and embedder under these
    stores instead (where no OpenSearch or Bedrock is reachable, as in the emulator tests).
    """
    import boto3
    from botocore.config import Config

    from ragmcp.adapters.aws.audit import S3CheckpointStore, secrets_manager_key
    from ragmcp.adapters.aws.dynamodb import (
        DynamoAuditStore,
        DynamoConversationStore,
        DynamoDocumentStore,
        DynamoEmbeddingCache,
        DynamoJobStore,
        DynamoKeyStore,
        DynamoRateLimiter,
        DynamoSourceStore,
        DynamoUploadStore,
        DynamoUserDirectory,
    )
    from ragmcp.adapters.aws.s3 import S3BlobStore, S3Links, s3_location
    from ragmcp.adapters.aws.stepfunctions import StepFunctionsRunner, sfn_client
    from ragmcp.adapters.aws.tasks import ObjectEventTaskQueue
    from ragmcp.ingest.events import RENDITIONS_PREFIX, source_key

    session = boto3.session.Session()
    config = Config(retries={"mode": "standard", "max_attempts": 5})
    dynamodb = session.resource("dynamodb", config=config)
    s3 = session.client("s3", config=config.merge(Config(signature_version="s3v4")))  # SigV4 presigned links
    embedder = _aws_embedder(s, session, config)
    documents = DynamoDocumentStore(dynamodb.Table(s.aws.documents_table))
    jobs = DynamoJobStore(dynamodb.Table(s.aws.jobs_table))
    blobs = S3BlobStore(s3)
    sources = DynamoSourceStore(dynamodb.Table(s.aws.catalog_table))
    sqs = lazy(lambda: session.client("sqs", config=config))
    tasks = ObjectEventTaskQueue(jobs, dynamodb.Table(s.aws.jobs_table), sqs, s.aws.ingest_queue_url)

    def location_for(tenant: str, source_id: str) -> str:
        return s3_location(s.aws.drop_bucket, source_key(tenant, source_id))

    def renditions_for(tenant: str, source_id: str) -> str:
        return s3_location(s.aws.drop_bucket, f"{RENDITIONS_PREFIX}{tenant}/{source_id}")

    stash = PassageStash(blobs, s3_location(s.aws.drop_bucket, "staging"))
    remote = None
    if s.aws.synthesis_state_machine_arn:
        sfn = lazy(lambda: sfn_client(session))
        remote = StepFunctionsRunner(sfn, s.aws.synthesis_state_machine_arn, _aws_generator_id(s), stash)
    return _assemble(
        s,
        Adapters(
            index=build_search_index(s, dynamodb.Table(s.aws.documents_table), session.region_name),
            documents=documents,
            jobs=jobs,
            sources=sources,
            blobs=blobs,
            embedder=embedder,
            cache=DynamoEmbeddingCache(dynamodb.Table(s.aws.embedding_cache_table)),
            tasks=tasks,
            users=DynamoUserDirectory(dynamodb.Table(s.aws.catalog_table)),
            uploads=DynamoUploadStore(dynamodb.Table(s.aws.uploads_table)),
            conversations=DynamoConversationStore(dynamodb.Table(s.aws.conversations_table)),
            keys=DynamoKeyStore(dynamodb.Table(s.aws.keys_table)),
            limiter=DynamoRateLimiter(dynamodb.Table(s.aws.rate_limits_table), s.aws.concurrency_lease_seconds),
            audit=DynamoAuditStore(dynamodb.Table(s.aws.audit_table)),
            audit_key=lazy_value(
                lambda: secrets_manager_key(session.client("secretsmanager", config=config), s.aws.audit_key_secret)
            ),
            checkpoints=S3CheckpointStore(s3, s.aws.audit_archive_bucket),
            links=S3Links(
                blobs, Originals(blobs, sources, renditions_for), s.server.link_ttl_seconds, session.get_credentials
            ),
            generator=_aws_generator(s, session, config, embedder),
            location_for=location_for,
            renditions_for=renditions_for,
            staging_location=s3_location(s.aws.drop_bucket, "staging"),
            remote_synthesis=remote,
            passage_stash=stash,
            reranker=_aws_reranker(s, session, config) if s.search.rerank else None,
            object_jobs=tasks,
            console_secret=s.security.console_secret.get_secret_value().encode()
            if s.security.console_secret is not None
            else None,
        ),
        reindex,
    )


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


def _onnx_embedder(s: Settings) -> Embedder:
    from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(
        max_tokens=s.embedding.embed_max_tokens,
        batch_size=s.embedding.embed_batch,
        workers=s.embedding.embed_workers,
        quantized_queries=s.embedding.model_cache if s.embedding.query_int8 or s.embedding.document_int8 else None,
        quantized_documents=s.embedding.document_int8,
    )


def _aws_embedder(s: Settings, session: Any, config: Any) -> Embedder:
    if s.aws.embedder == "onnx":
        return _onnx_embedder(s)
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
    """The AWS deployment's search index (also all the index setup custom resource needs)."""
    if s.aws.search_backend == "sqlite":
        from ragmcp.adapters.local.database import Database, fts_tokenizer
        from ragmcp.adapters.local.sqlite_index import SqliteSearchIndex

        return SqliteSearchIndex(Database(s.server.db_path), tokenizer=fts_tokenizer(s.index.fts_stemming))
    from ragmcp.adapters.aws.ledger import DynamoChunkLedger
    from ragmcp.adapters.aws.opensearch import OpenSearchIndex, opensearch_client

    if not s.aws.opensearch_endpoint:
        raise ValueError("search_backend opensearch needs RAGMCP_OPENSEARCH_ENDPOINT")
    service = s.aws.opensearch_service if s.aws.opensearch_sigv4 else None
    client = opensearch_client(s.aws.opensearch_endpoint, region, service, timeout=OPENSEARCH_TIMEOUT)
    ledger = DynamoChunkLedger(documents_table)
    return OpenSearchIndex(client, s.aws.opensearch_index, ledger, serverless=s.aws.opensearch_service == "aoss")
