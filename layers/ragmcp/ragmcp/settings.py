"""Every setting in one place, grouped by concern (`settings.search.fts_k`); each can be given as
an environment variable RAGMCP_<NAME> with its flat name (RAGMCP_FTS_K), or by that name as a
keyword (`Settings(fts_k=20)`)."""

from __future__ import annotations

import argparse
import difflib
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import AliasChoices, BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from ragmcp.domain.models import SearchMode

ENV_PREFIX = "RAGMCP_"
NOT_SETTINGS = frozenset(
    {
        "RAGMCP_AUTHORIZATION",  # an MCP client's header (ragmcp.connect's configurations)
        "RAGMCP_SHARED_DIR",  # the tests: where the shared documents are
        "RAGMCP_SCREENSHOTS",  # the tests: where the console's browser test keeps its screenshots
        "RAGMCP_CHROMIUM",  # the tests: the browser the console's browser test drives
        "RAGMCP_INDEX_TEMPLATE",  # localstack/init: the LocalStack provisioning script
        "RAGMCP_RESOURCE_PREFIX",
        "RAGMCP_INGEST_VISIBILITY_SECONDS",
    }
)
"""RAGMCP_ variables that ragmcp's tools read, never a setting: these and RAGMCP_TEST_* (the test suite's knobs)
pass; any other RAGMCP_ variable that names no setting is refused (a typo would otherwise pass silently)."""
TEST_PREFIX = "RAGMCP_TEST_"


class _Group(BaseModel):
    """A group of settings: a name it does not hold is refused (Settings names the closest)."""

    model_config = {"extra": "forbid"}


class ServerSettings(_Group):
    """Where and as what the server runs: backend, data, address, the folder it serves."""

    backend: Literal["local", "aws"] = "local"
    data_dir: Path = Path(".ragmcp")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = Field(
        default=None, description="Base URL agents use to reach this server; links to originals are built on it."
    )
    docs: Path | None = Field(default=None, description="Folder ingested and watched by `ragmcp serve`.")
    watch: bool = True
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="`ragmcp serve`: processes answering requests on one socket; the first also ingests and keeps"
        " the vector graph, the others read (one per core is a good start).",
    )
    tenant: str = "default"
    source: str = "docs"
    resource_page_size: int = Field(default=50, ge=1, le=1000, description="Documents per resources/list page.")
    link_ttl_seconds: int = Field(
        default=15 * 60, ge=60, description="How long a link to an original lives (never past the caller's token)."
    )
    max_body_bytes: int = Field(
        default=2 * 1024 * 1024,
        gt=0,
        description="Larger requests to /mcp are refused (HTTP 413) by the MCP SDK's limit.",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="`ragmcp serve`: a request's headers must arrive within this many seconds of the connection"
        " becoming idle, else 408 and the connection is closed.",
    )
    body_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="`ragmcp serve`: a request's body must arrive within this many seconds of its headers, else 408.",
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="`ragmcp serve`: open connections per process (kept below its open files limit, raised to the"
        " hard limit at start); past it, the connection waiting longest for its request is closed, or the new one"
        " is answered 503 with Retry-After when all are answering.",
    )

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ragmcp.db"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")


class IngestSettings(_Group):
    """Reading, chunking and storing documents, and uploads."""

    mass_delete_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="A sync that would delete more than this share of a source's documents (or all of them)"
        " holds the deletions until `--allow-mass-delete` or rag.admin.sync applies them.",
    )
    max_file_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    ocr: bool = Field(
        default=True,
        description="Read PDF pages without a text layer by OCR (RapidOCR, offline); off: such pages are skipped.",
    )
    row_pk_column: str = "id"
    chunk_tokens: int = Field(default=256, ge=32, le=512)
    chunk_overlap: int = Field(default=32, ge=0, le=128)
    chunk_max_chars: int = Field(
        default=2048,
        ge=256,
        description="Characters of one passage at most: text without spaces (a blob, CJK) is cut here too.",
    )
    parse_sandbox: bool = Field(
        default=True,
        description="Embedded: parse each file in a worker process under the parse_memory_mb, parse_cpu_seconds and"
        " parse_timeout_seconds limits (off: in the server's process, with the format budgets only).",
    )
    parse_workers: int = Field(default=1, ge=1, le=16, description="Embedded: files parsed at once, one worker each.")
    parse_memory_mb: int = Field(
        default=2048, ge=256, description="A parse worker's address space (RLIMIT_AS; OCR of a page peaks near 1.4 GB)."
    )
    parse_cpu_seconds: int = Field(default=120, ge=1, description="CPU time one file's parse may take.")
    parse_timeout_seconds: float = Field(default=300.0, gt=0, description="Wall-clock time one file's parse may take.")
    parse_max_chars: int = Field(default=10_000_000, gt=0, description="Characters of text one file may yield.")
    parse_max_inflated_bytes: int = Field(
        default=128 * 1024 * 1024, gt=0, description="DOCX/PPTX/XLSX: the package's parts inflated together."
    )
    parse_max_pages: int = Field(default=2000, gt=0, description="PDF: pages.")
    parse_max_ocr_pages: int = Field(default=50, ge=0, description="PDF: pages without a text layer read by OCR.")
    parse_max_cells: int = Field(
        default=1_000_000, gt=0, description="XLSX: cells with a value, and cells merged ranges cover."
    )
    parse_max_rows: int = Field(default=500_000, gt=0, description="CSV/JSONL: records.")
    parse_max_columns: int = Field(default=16_384, gt=0, description="CSV/JSONL: fields of one record.")
    parse_max_tags: int = Field(
        default=500_000,
        gt=0,
        description="HTML, Markdown, DOCX, PPTX: markup tags (a parsed tree takes up to 1 KB a tag).",
    )
    max_upload_bytes: int = Field(default=100 * 1024 * 1024, gt=0)
    max_part_bytes: int = Field(default=1024 * 1024, gt=0)
    upload_ttl_seconds: int = Field(default=600, ge=10)
    sweep_interval_seconds: float = Field(default=30.0, gt=0)


class EmbeddingSettings(_Group):
    """The embedded ONNX embedder and the embedding cache."""

    embed_batch: int = Field(
        default=1,
        ge=1,
        le=512,
        description="Embedded: texts a run of the model takes at most (1: the least CPU a text, BENCHMARKS.md).",
    )
    embed_max_tokens: int = Field(default=256, ge=16, le=512)
    embed_workers: int = Field(
        default=0, ge=0, le=64, description="Embedded: ONNX runs at once, one thread each (0: one per core)."
    )
    query_batch: int = Field(
        default=8,
        ge=1,
        le=512,
        description="Embedded: a search's phrases a run of the query model takes at most; its phrases are cut into"
        " one run a worker, shortest together (1: a run a phrase, each vector independent of the others).",
    )
    query_fused_attention: bool = Field(
        default=True,
        description="Embedded: the int8 query model's self-attention in onnxruntime's MultiHeadAttention (fewer"
        " operators a run; queries only, BENCHMARKS.md has its CPU and nDCG@10).",
    )
    query_int8: bool = Field(
        default=True,
        description="Embedded: embed search phrases with an int8 (dynamically quantized) copy of the model.",
    )
    document_int8: bool | None = Field(
        default=None,
        description="Embedded: embed documents too with the int8 copy (another model id; BENCHMARKS.md has its"
        " speed and nDCG@10). Unset: int8 for a new index, an index built with float documents keeps them"
        " (true and `ragmcp reindex` re-embed it).",
    )
    query_cache_size: int = Field(
        default=4096, ge=0, description="Search phrases whose vectors each process keeps (LRU); 0: off."
    )
    model_cache: Path = Field(
        default_factory=lambda: Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragmcp",
        description="Models derived from the pinned ones (the int8 query model), shared by every data_dir.",
    )
    embedding_cache: Path | None = Field(
        default=None, description="SQLite file of the embedding cache (default: the index's); indexes may share one."
    )


class SearchSettings(_Group):
    """How profiles search and what they return."""

    search_mode: SearchMode = Field(
        default="hybrid_scores",
        description="How profiles search: hybrid_scores (min-max bm25 and cosine, 1:1) was best on SciFact train and"
        " on the QA set (BENCHMARKS.md).",
    )
    fts_k: int = Field(default=50, ge=1, le=1000)
    vec_k: int = Field(default=50, ge=1, le=1000)
    rrf_k0: int = Field(default=60, ge=1, le=1000)
    fts_weight: float = Field(default=1.0, ge=0.0)
    vec_weight: float = Field(default=1.0, ge=0.0)
    relevance_floor: float = Field(
        default=0.44,
        ge=0.0,
        le=2.0,
        description="A query none of whose hits has a floor score (cosine similarity to the search phrases, plus"
        " floor_coverage times the share of a phrase's words they or their document's title and file name hold)"
        " this high returns nothing; otherwise every"
        " hit is returned; 0: off. Fitted by cross-validation for the embedded MiniLM model (`ragmcp eval-floor`,"
        " BENCHMARKS.md); another embedding model needs its own.",
    )
    floor_coverage: float = Field(default=0.4, ge=0.0, le=1.0, description="Word coverage's weight in the floor score.")
    mindset_segments: int = Field(default=8, ge=1, le=20)
    max_phrase_bytes: int = Field(default=8192, gt=0)
    rerank: bool = Field(
        default=False, description="AWS: reorder the passages with Bedrock's Rerank API before the confidence gate."
    )
    rerank_model_id: str = Field(default="amazon.rerank-v1:0", description="AWS: the Bedrock reranking model.")

    def defaults(self) -> dict[str, object]:
        """The server's search knobs as SearchRequest fields; a profile overrides what its contract sets."""
        return {
            "mode": self.search_mode,
            "fts_k": self.fts_k,
            "vec_k": self.vec_k,
            "rrf_k0": self.rrf_k0,
            "fts_weight": self.fts_weight,
            "vec_weight": self.vec_weight,
            "floor": self.relevance_floor,
            "floor_coverage": self.floor_coverage,
        }


class IndexSettings(_Group):
    """The embedded index: keyword index, vector graph, postings."""

    fts_stemming: bool = Field(
        default=True,
        description="Embedded index: Porter stemming in the FTS5 keyword index; a change needs `ragmcp reindex`.",
    )
    vector_graph: bool = Field(
        default=True, description="Embedded index: keep an HNSW graph of the vectors (maintained by `ragmcp serve`)."
    )
    vector_exact_below: int = Field(
        default=5000,
        ge=0,
        description="Vector searches that may see fewer chunks than this scan exactly in SQL; larger ones walk the"
        " graph.",
    )
    postings_cache_entries: int = Field(
        default=128_000_000,
        ge=0,
        description="Embedded index: (chunk, bm25) pairs of searched terms in memory, 4 bytes each (512 MB at most"
        " by default: the words searched in 1M chunks), in each process; 0: off.",
    )
    hnsw_m: int = Field(default=32, ge=4, le=128)
    hnsw_ef_construction: int = Field(default=100, ge=8, le=1000)
    hnsw_ef_search: int = Field(
        default=80,
        ge=8,
        le=2000,
        description="Embedded index: how wide the HNSW graph is searched up to 100k chunks; wider above, growing"
        " with the graph so its recall holds (adapters/local/hnsw.py, ef_search_for).",
    )
    hnsw_vectors: Literal["auto", "float32", "fp16", "sq8"] = Field(
        default="auto",
        description="Embedded index: how the HNSW graph stores vectors (fp16: half of float32's memory, the same"
        " recall and nDCG; sq8: 8 bits a dimension, a quarter, its hits rescored from the stored float32 vectors;"
        " auto: fp16 up to 500k chunks, sq8 above); a saved graph of more bits a dimension than asked is"
        " re-encoded under its links, of fewer bits rebuilt.",
    )


class SynthesisSettings(_Group):
    """Answers: the confidence gate, conversations and the generator."""

    silence_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence_midpoint: float = Field(
        default=0.39, description="Similarity (with the coverage bonus and penalty) at which confidence is 0.5."
    )
    confidence_steepness: float = Field(default=12.0, gt=0.0)
    confidence_coverage_weight: float = Field(
        default=1.25, ge=0.0, description="How much similarity each missing share of the question's words costs."
    )
    conversation_ttl_seconds: int = Field(default=3600, ge=60)
    generator_url: str | None = Field(default=None, description="OpenAI-compatible base URL; extractive if unset.")
    generator_model: str = "gpt-4o-mini"
    generator_api_key: str | None = None
    generation_model_id: str = "anthropic.claude-3-haiku-20240307-v1:0"
    generation_max_tokens: int = Field(default=1024, ge=64, le=8192)


class SecuritySettings(_Group):
    """Who may call: open mode, OAuth, transport checks, keys, the console and the audit trail."""

    open: bool = Field(
        default=False,
        description="Embedded server on loopback only: answer requests that present no API key, as the"
        " `--open` flag asks. Never with the AWS backend. Off: every request needs an active key.",
    )
    oauth_issuer: str | None = Field(
        default=None, description="OAuth 2.1: the authorization server whose access tokens (JWTs) are accepted."
    )
    oauth_audience: str | None = Field(
        default=None, description="This server's resource URL, the `aud` its tokens carry (default: <public URL>/mcp)."
    )
    oauth_audience_claim: str = Field(
        default="auto",
        description="Claim holding the audience: `auto` takes `aud`, or `client_id` in a token without `aud` "
        "(Cognito access tokens, with the app client id as RAGMCP_OAUTH_AUDIENCE).",
    )
    oauth_jwks_url: str | None = Field(
        default=None, description="The issuer's JWKS URL (default: the jwks_uri of the issuer's metadata)."
    )
    oauth_algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384"],
        description="Signature algorithms accepted (never `none`, never HMAC).",
    )
    oauth_scope_prefix: str = Field(
        default="", description="Prefix of this server's scopes in tokens, e.g. `ragmcp/` for `ragmcp/read`."
    )
    oauth_claims_tenant: str = Field(default="tenant", description="Claim naming the tenant.")
    oauth_claims_user: str = Field(default="sub", description="Claim naming the user.")
    oauth_claims_groups: str | None = Field(
        default="groups", description="Claim listing the user's groups; unset or absent: the user directory's."
    )
    oauth_claims_tier: str | None = Field(
        default="tier", description="Claim naming the user's tier; unset or absent: the user directory's."
    )
    oauth_default_tenant: str | None = Field(
        default=None, description="Tenant of tokens without the tenant claim (default: refuse them)."
    )
    oauth_leeway_seconds: int = Field(default=30, ge=0, le=300, description="Clock skew allowed on exp and nbf.")
    oauth_jwks_min_refresh_seconds: float = Field(
        default=60.0, ge=0, description="An unknown key id refetches the JWKS at most this often."
    )
    dns_rebinding_protection: bool = Field(
        default=True, description="Check Host and Origin headers (off behind API Gateway, which sets its own Host)."
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Extra Host values every route accepts besides loopback and the public URL's, e.g. a proxy's"
        " (`name` or `name:*` for any port); never in open mode.",
    )
    audit_checkpoint_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the audit heads are checkpointed outside the database (and at shutdown).",
    )
    console_secret: SecretStr | None = Field(
        default=None, description="AWS: signs the web console's session cookies (locally: data_dir/console.key)."
    )
    key_env: str = Field(default="live", description="The <env> part of new API keys: rmcp_<env>_<64 hex>.")
    kb_mcp_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("kb_mcp_api_key", "RAGMCP_KB_MCP_API_KEY"),
        description="kb-mcp-server.md's KB_MCP_API_KEY (also read without the prefix): a key of the kb profile"
        " (/mcp/kb) for the server's tenant, scopes read and write, its own identity, beside `ragmcp keys`' keys.",
    )

    @field_validator("kb_mcp_api_key", mode="before")
    @classmethod
    def _kb_key_set_or_not(cls, value: Any) -> Any:
        """Set to nothing is not set; a key shorter than 16 characters is refused (never echoed)."""
        secret = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(secret, str) and not secret.strip():
            return None
        if isinstance(secret, str) and len(secret.strip()) < 16:
            raise ValueError("KB_MCP_API_KEY must be at least 16 characters")
        return secret.strip() if isinstance(secret, str) else value


class AwsSettings(_Group):
    """The AWS deployment (backend "aws"): the SAM template sets each of these on every function;
    the defaults are the names the LocalStack init script creates."""

    search_backend: Literal["opensearch", "sqlite"] = Field(
        default="opensearch", description="AWS: the SearchIndex; sqlite keeps the embedded index under data_dir."
    )
    embedder: Literal["bedrock", "onnx"] = Field(default="bedrock", description="AWS: the Embedder.")
    generator: Literal["bedrock", "extractive"] = Field(default="bedrock", description="AWS: the Generator.")
    opensearch_endpoint: str | None = Field(default=None, description="Domain or collection endpoint, or a URL.")
    opensearch_service: Literal["es", "aoss"] = Field(
        default="es", description="es: a managed domain; aoss: a Serverless vector collection."
    )
    opensearch_sigv4: bool = Field(default=True, description="Sign requests (off for a local OpenSearch).")
    opensearch_index: str = "ragmcp-chunks"
    embedding_model_id: str = "amazon.titan-embed-text-v2:0"
    embedding_dimension: Literal[256, 512, 1024] = 1024
    bedrock_concurrency: int = Field(default=8, ge=1, le=64, description="Parallel embedding calls.")
    drop_bucket: str = "ragmcp-drop"
    audit_archive_bucket: str = Field(
        default="ragmcp-audit-archive", description="AWS: the Object Lock bucket the audit checkpoints go to."
    )
    audit_key_secret: str = Field(
        default="ragmcp-audit-key", description="AWS: the Secrets Manager secret (name or ARN) of the audit key."
    )
    documents_table: str = "ragmcp-documents"
    jobs_table: str = "ragmcp-jobs"
    catalog_table: str = Field(default="ragmcp-catalog", description="Sources and the user directory.")
    keys_table: str = "ragmcp-keys"
    uploads_table: str = "ragmcp-uploads"
    conversations_table: str = "ragmcp-conversations"
    rate_limits_table: str = "ragmcp-rate-limits"
    audit_table: str = "ragmcp-audit"
    embedding_cache_table: str = "ragmcp-embedding-cache"
    idempotency_table: str = "ragmcp-idempotency"
    ingest_queue_url: str | None = Field(default=None, description="The drop bucket's event queue (its depth).")
    prune_versions_of: str | None = Field(
        default=None,
        description="AWS: the function whose unused published versions the janitor's schedule deletes "
        "(keeping the `live` alias's, the one before and newer ones).",
    )
    ingest_dead_letter_queue_url: str | None = Field(
        default=None, description="AWS: where change events that failed their retries wait (`ragmcp jobs redrive`)."
    )
    synthesis_state_machine_arn: str | None = Field(
        default=None, description="Run synthesis on this Express state machine; in process when unset."
    )
    concurrency_lease_seconds: int = Field(
        default=120, ge=10, description="AWS: how long a request holds a concurrency slot at most (above the timeout)."
    )

    @field_validator("embedding_dimension", mode="before")
    @classmethod
    def _dimension_as_number(cls, value: Any) -> Any:
        """RAGMCP_EMBEDDING_DIMENSION=256 (as the SAM template sets it) is the number 256: a literal
        of numbers takes no text."""
        return int(value) if isinstance(value, str) and value.strip().isdigit() else value


GROUPS: dict[str, type[BaseModel]] = {
    "server": ServerSettings,
    "ingest": IngestSettings,
    "embedding": EmbeddingSettings,
    "search": SearchSettings,
    "index": IndexSettings,
    "synthesis": SynthesisSettings,
    "security": SecuritySettings,
    "aws": AwsSettings,
}
FIELDS: dict[str, tuple[str, FieldInfo]] = {
    name: (group, info) for group, model in GROUPS.items() for name, info in model.model_fields.items()
}
"""Each setting's flat name (its RAGMCP_<NAME> without the prefix) -> its group and field."""


class FlatEnvironment(PydanticBaseSettingsSource):
    """RAGMCP_<NAME> variables by their flat names, put in their groups: pydantic-settings' own
    environment source, read once per group model (it decodes JSON lists as it always did)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """The group `field_name`'s variables, by their flat names (None when none is set)."""
        values = EnvSettingsSource(GROUPS[field_name], env_prefix=ENV_PREFIX, case_sensitive=False)()  # type: ignore[arg-type]
        return values or None, field_name, True

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {name: None for name in unknown_variables(os.environ)}  # refused by Settings
        for group, info in self.settings_cls.model_fields.items():
            values, _, _ = self.get_field_value(info, group)
            if values:
                found[group] = values
        return found


def unknown_variables(environment: Mapping[str, str]) -> list[str]:
    """The RAGMCP_ variables of `environment` that name no setting (and are not one of NOT_SETTINGS),
    upper-cased (names were never case-sensitive)."""
    unknown = []
    for name in environment:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NOT_SETTINGS or upper.startswith(TEST_PREFIX):
            continue
        if upper[len(ENV_PREFIX) :].lower() not in FIELDS:
            unknown.append(upper)
    return sorted(unknown)


def unknown_setting(name: str) -> str:
    """`name` refused, with the closest setting's name when one is close (a variable's, for a variable)."""
    if name.startswith(ENV_PREFIX):
        flat = name[len(ENV_PREFIX) :].lower()
        close = difflib.get_close_matches(flat, FIELDS, n=1)
        guess = f"{ENV_PREFIX}{close[0].upper()}" if close else None
    else:
        close = difflib.get_close_matches(name.rsplit(".", 1)[-1], FIELDS, n=1)
        guess = close[0] if close else None
    return f"unknown setting {name}" + (f" (did you mean {guess}?)" if guess else "")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", hide_input_in_errors=True)

    server: ServerSettings = Field(default_factory=ServerSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    synthesis: SynthesisSettings = Field(default_factory=SynthesisSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    aws: AwsSettings = Field(default_factory=AwsSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, FlatEnvironment(settings_cls)

    @model_validator(mode="before")
    @classmethod
    def _flat_names_into_groups(cls, data: Any) -> Any:
        """`fts_k=20` (a keyword, or a flat key of any source) is `search.fts_k`; it wins over the
        same setting in a group given alongside it."""
        if not isinstance(data, dict):
            return data
        unknown = [name for name in data if name not in FIELDS and name not in GROUPS]
        if unknown:
            problems = "; ".join(unknown_setting(str(name)) for name in unknown)
            raise PydanticCustomError("unknown_setting", problems)
        grouped = {k: v for k, v in data.items() if k not in FIELDS}
        for name, value in data.items():
            if name in FIELDS:
                group = FIELDS[name][0]
                given = grouped.get(group) or {}
                values = given.model_dump(exclude_unset=True) if isinstance(given, BaseModel) else dict(given)
                grouped[group] = {**values, name: value}
        return grouped

    @model_validator(mode="after")
    def _never_open_on_aws(self) -> Settings:
        if self.security.open and self.server.backend == "aws":
            raise ValueError("open mode (no API keys) is for the embedded server on loopback, never the AWS backend")
        return self

    @property
    def resource_url(self) -> str:
        """This server's OAuth resource identifier (RFC 9728): RAGMCP_OAUTH_AUDIENCE when that is a URL,
        else <public URL>/mcp (Cognito's audience is an app client id, never a resource URL)."""
        audience = self.security.oauth_audience or ""
        return (audience if audience.startswith(("https://", "http://")) else f"{self.server.base_url}/mcp").rstrip("/")

    @property
    def oauth_token_audience(self) -> str:
        """The audience this server's access tokens carry: RAGMCP_OAUTH_AUDIENCE, else the resource URL."""
        return (self.security.oauth_audience or self.resource_url).rstrip("/")

    def transport_hosts(self) -> tuple[list[str], list[str]]:
        """Host and Origin values every route accepts (web/hosts.py): loopback names and the address
        served on; unless in open mode, also the public URL's host and RAGMCP_ALLOWED_HOSTS."""
        from urllib.parse import urlsplit

        hosts = {"127.0.0.1", "localhost", "[::1]", self.server.host}
        public = urlsplit(self.server.base_url)
        if not self.security.open:
            hosts.update(self.security.allowed_hosts)
            if public.hostname:
                hosts.add(public.netloc)
        with_ports = sorted({h for host in hosts for h in (host, f"{host}:*")})
        origins = sorted({f"{scheme}://{h}" for h in with_ports for scheme in ("http", "https")})
        return with_ports, origins


class SettingsError(ValueError):
    """Settings that cannot be used, said in one line: each environment variable, what is wrong
    with it and the values it allows (never the value given, which may be a secret)."""


def settings_from_args(args: argparse.Namespace, groups: tuple[str, ...] | None = None) -> Settings:
    """The settings a `ragmcp` command runs with: the environment's, with the options given on its command
    line (those it has and were given) in their place. ragmcp.cli and the bench's commands both use it.
    With `groups`, only those are read (load_groups), and the options of the others left out."""
    overrides: dict[str, Any] = {
        key: value
        for key, value in {
            "data_dir": args.data_dir,
            "backend": getattr(args, "backend", None),
            "host": getattr(args, "host", None),
            "port": getattr(args, "port", None),
            "docs": getattr(args, "docs", None),
            "tenant": getattr(args, "tenant", None),
            "source": getattr(args, "source", None),
            "open": getattr(args, "open", None) or None,
            "workers": getattr(args, "workers", None),
        }.items()
        if value is not None
    }
    if groups is not None:
        return load_groups(*groups, **{k: v for k, v in overrides.items() if FIELDS[k][0] in groups})
    return load_settings(**overrides)


G = TypeVar("G", bound=BaseModel)


def load_group(model: type[G], overrides: Mapping[str, Any] | None = None) -> G:
    """One group's settings (e.g. AwsSettings) from its RAGMCP_<NAME> variables alone, for a function that
    needs that group only: the other groups' variables are not read. An unknown RAGMCP_ variable is
    refused as Settings refuses it. `overrides` (the group's settings by name) win over the environment."""
    unknown = unknown_variables(os.environ)
    if unknown:
        raise SettingsError("invalid settings: " + "; ".join(unknown_setting(name) for name in unknown))
    try:
        values = EnvSettingsSource(model, env_prefix=ENV_PREFIX, case_sensitive=False)()  # type: ignore[arg-type]
        return model.model_validate({**values, **(overrides or {})})
    except ValidationError as exc:
        raise SettingsError(settings_problem(exc)) from None
    except SourceError as exc:
        raise SettingsError(f"invalid settings: {exc}") from None


class _Unread:
    """A settings group its function does not read (load_groups): using it is a mistake in that function's
    list of groups, said as such instead of a default value standing in for what the environment says."""

    def __init__(self, group: str):
        self._group = group

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"settings group {self._group!r} was not read ({self._group}.{name}): add it to the groups this "
            "function loads (load_groups)"
        )


def load_groups(*groups: str, **overrides: Any) -> Settings:
    """Settings with only these groups read (each from its RAGMCP_<NAME> variables, as load_group reads
    one; `overrides` by flat name win), for a function that uses those alone: the other groups are
    neither read nor made, and using one raises AttributeError. An unknown RAGMCP_ variable is refused
    as Settings refuses it."""
    unknown = [group for group in groups if group not in GROUPS]
    unread = [name for name in overrides if name not in FIELDS or FIELDS[name][0] not in groups]
    if unknown or unread:
        raise ValueError(f"no settings group {unknown} or settings {unread} of the groups {groups}")
    read = {
        name: load_group(model, {k: v for k, v in overrides.items() if FIELDS[k][0] == name})
        if name in groups
        else _Unread(name)
        for name, model in GROUPS.items()
    }
    return Settings.model_construct(**read)


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(settings_problem(exc)) from None
    except SourceError as exc:  # a value the environment source cannot decode (a list that is not JSON)
        name = next((n for n in FIELDS if f'"{n}"' in str(exc)), None)
        if name is None:
            raise SettingsError(f"invalid settings: {exc}") from None
        problem = f"{ENV_PREFIX}{name.upper()}: unreadable (allowed: {allowed_values(name)})"
        raise SettingsError(f"invalid settings: {problem}") from None


def settings_problem(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        name = next((str(part) for part in err["loc"] if str(part) in FIELDS), "")
        if err["type"] == "extra_forbidden":  # a group given as a mapping, with a name it does not hold
            problems.append(unknown_setting(".".join(str(part) for part in err["loc"])))
        elif name in FIELDS:
            problems.append(f"{ENV_PREFIX}{name.upper()}: {err['msg']} (allowed: {allowed_values(name)})")
        else:
            problems.append(err["msg"])
    return "invalid settings: " + "; ".join(problems)


def allowed_values(name: str) -> str:
    """The values a setting takes, as a person would say them: choices, a range, a kind."""
    field = FIELDS[name][1]
    kinds = [a for a in _alternatives(field.annotation) if a is not type(None)]
    optional = len(kinds) < len(_alternatives(field.annotation))
    bounds = []
    for rule in field.metadata:
        for attr, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(rule, getattr(annotated_types, attr.capitalize())):
                bounds.append(f"{word} {getattr(rule, attr)}")
    said = []
    for kind in kinds:
        if get_origin(kind) is Literal:
            said.append("one of " + ", ".join(str(v) for v in get_args(kind)))
        elif kind is bool:
            said.append("true or false")
        elif kind in (int, float):
            said.append(" ".join(["an integer" if kind is int else "a number", " and ".join(bounds)]).strip())
        elif get_origin(kind) is list:
            said.append('a JSON array of strings, e.g. ["a","b"]')
        elif kind is Path:
            said.append("a path")
        else:
            said.append("text")
    return " or ".join(said) + (" (or unset)" if optional else "")


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)
