"""Settings are grouped by concern (`settings.search.fts_k`) while every RAGMCP_<NAME> variable and
every flat keyword (`Settings(fts_k=20)`, the CLI's overrides) keeps its flat name."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from ragmcp.settings import (
    FIELDS,
    GROUPS,
    NOT_SETTINGS,
    AwsSettings,
    Settings,
    SettingsError,
    load_group,
    load_settings,
)

# The flat settings before they were grouped (issue 13), each of which must still land.
FLAT_NAMES = """
backend data_dir host port public_url docs watch workers open mass_delete_share tenant source max_file_bytes ocr
row_pk_column chunk_tokens chunk_overlap embed_batch embed_max_tokens embed_workers query_int8 query_cache_size
query_batch query_fused_attention
chunk_max_chars parse_sandbox parse_workers parse_memory_mb parse_cpu_seconds parse_timeout_seconds parse_max_chars
parse_max_inflated_bytes parse_max_pages parse_max_ocr_pages parse_max_cells parse_max_rows parse_max_columns
parse_max_tags
model_cache embedding_cache fts_stemming search_mode fts_k vec_k rrf_k0 fts_weight vec_weight relevance_floor
floor_coverage vector_graph vector_exact_below postings_cache_entries hnsw_m hnsw_ef_construction hnsw_ef_search
hnsw_vectors
max_upload_bytes max_part_bytes upload_ttl_seconds sweep_interval_seconds silence_threshold confidence_midpoint
confidence_steepness confidence_coverage_weight conversation_ttl_seconds generator_url generator_model
generator_api_key mindset_segments resource_page_size link_ttl_seconds oauth_issuer oauth_audience
oauth_audience_claim oauth_jwks_url oauth_algorithms oauth_scope_prefix oauth_claims_tenant oauth_claims_user
oauth_claims_groups oauth_claims_tier oauth_default_tenant oauth_leeway_seconds oauth_jwks_min_refresh_seconds
dns_rebinding_protection allowed_hosts audit_checkpoint_seconds console_secret key_env kb_mcp_api_key max_body_bytes
max_phrase_bytes
header_timeout_seconds body_timeout_seconds max_connections
search_backend embedder generator opensearch_endpoint opensearch_service opensearch_sigv4 opensearch_index
embedding_model_id embedding_dimension generation_model_id generation_max_tokens rerank rerank_model_id
bedrock_concurrency drop_bucket audit_archive_bucket audit_key_secret documents_table jobs_table catalog_table
keys_table uploads_table conversations_table rate_limits_table audit_table embedding_cache_table idempotency_table
ingest_queue_url prune_versions_of ingest_dead_letter_queue_url synthesis_state_machine_arn concurrency_lease_seconds
document_int8
""".split()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.upper().startswith("RAGMCP_")]:
        monkeypatch.delenv(name)


def another_value(name: str, field: FieldInfo) -> Any:
    """A valid value of the setting that is not its default."""
    kinds = [k for k in _alternatives(field.annotation) if k is not type(None)]
    kind = kinds[0]
    default = field.get_default(call_default_factory=True)
    if get_origin(kind) is Literal:
        return next(v for v in get_args(kind) if v != default)
    if kind is bool:
        return not default
    if kind in (int, float):
        step = 1 if kind is int else 0.25
        upper = [r.le for r in field.metadata if isinstance(r, annotated_types.Le)]
        upper += [r.lt for r in field.metadata if isinstance(r, annotated_types.Lt)]
        value = default + step
        return value if not upper or value < min(upper) else default - step
    if kind is Path:
        return Path(f"/tmp/ragmcp-settings-test/{name}")
    if get_origin(kind) is list:
        return ["a.example", "b.example"]
    if kind is SecretStr:
        return SecretStr(f"secret-of-{name}")
    assert kind is str, (name, kind)
    return f"value-of-{name}"


def as_environment(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)


def landed(loaded: Settings, name: str) -> Any:
    value = getattr(getattr(loaded, FIELDS[name][0]), name)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def expected(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_every_flat_name_is_a_setting_of_one_group_and_no_setting_is_new() -> None:
    assert sorted(FIELDS) == sorted(FLAT_NAMES)
    assert sum(len(model.model_fields) for model in GROUPS.values()) == len(FLAT_NAMES)  # none in two groups


@pytest.mark.parametrize("name", FLAT_NAMES)
def test_every_flat_environment_variable_lands_in_its_group(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    value = another_value(name, FIELDS[name][1])
    assert landed(Settings(), name) != expected(value)
    monkeypatch.setenv(f"RAGMCP_{name.upper()}", as_environment(value))
    assert landed(load_settings(), name) == expected(value)


@pytest.mark.parametrize("name", FLAT_NAMES)
def test_every_flat_keyword_lands_in_its_group(name: str) -> None:
    value = another_value(name, FIELDS[name][1])
    assert landed(load_settings(**{name: value}), name) == expected(value)


def test_a_keyword_wins_over_the_environment_and_both_keep_the_rest_of_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGMCP_FTS_K", "7")
    monkeypatch.setenv("ragmcp_vec_k", "9")  # names were never case-sensitive
    settings = Settings(fts_k=11, search={"rrf_k0": 5})
    assert (settings.search.fts_k, settings.search.vec_k, settings.search.rrf_k0) == (11, 9, 5)
    assert settings.search.defaults()["fts_k"] == 11


def test_errors_name_the_flat_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match=r"RAGMCP_FTS_K: .*allowed: an integer >= 1 and <= 1000"):
        load_settings(fts_k=0)
    with pytest.raises(SettingsError, match=r"RAGMCP_ALLOWED_HOSTS: Input should be a valid string"):
        load_settings(allowed_hosts=[1])
    monkeypatch.setenv("RAGMCP_ALLOWED_HOSTS", "not json")
    with pytest.raises(SettingsError, match=r"RAGMCP_ALLOWED_HOSTS: unreadable \(allowed: a JSON array of strings"):
        load_settings()
    monkeypatch.delenv("RAGMCP_ALLOWED_HOSTS")
    monkeypatch.setenv("RAGMCP_BACKEND", "aws")
    with pytest.raises(SettingsError, match="never the AWS backend"):
        load_settings(open=True)


def test_the_properties_that_span_groups() -> None:
    settings = Settings(public_url="https://rag.example/", oauth_audience="client-id-123", allowed_hosts=["proxy"])
    assert settings.server.base_url == "https://rag.example"
    assert settings.resource_url == "https://rag.example/mcp"
    assert settings.oauth_token_audience == "client-id-123"
    hosts, origins = settings.transport_hosts()
    assert {"proxy", "proxy:*", "rag.example", "127.0.0.1:*"} <= set(hosts)
    assert "https://rag.example" in origins
    assert settings.server.db_path == Path(".ragmcp") / "ragmcp.db"


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def test_an_unknown_keyword_is_refused_naming_the_closest_setting() -> None:
    with pytest.raises(SettingsError, match=r"unknown setting fts_kk \(did you mean fts_k\?\)"):
        load_settings(fts_kk=3)
    with pytest.raises(SettingsError, match=r"unknown setting search\.fts_kk \(did you mean fts_k\?\)"):
        load_settings(search={"fts_kk": 3})
    with pytest.raises(SettingsError, match=r"unknown setting colour_scheme$"):  # nothing close: no guess
        load_settings(colour_scheme="dark")


def test_an_unknown_environment_variable_is_refused_naming_the_closest_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGMCP_SEARCHMODE", "fts")
    with pytest.raises(SettingsError, match=r"unknown setting RAGMCP_SEARCHMODE \(did you mean RAGMCP_SEARCH_MODE\?\)"):
        load_settings()
    with pytest.raises(ValidationError, match="RAGMCP_SEARCHMODE") as direct:
        Settings(generator_api_key="sk-very-secret")  # as a Lambda function built them: no value in the error
    assert "sk-very-secret" not in str(direct.value)
    monkeypatch.delenv("RAGMCP_SEARCHMODE")
    monkeypatch.setenv("ragmcp_fts_kk", "3")  # names were never case-sensitive
    with pytest.raises(SettingsError, match=r"RAGMCP_FTS_KK \(did you mean RAGMCP_FTS_K\?\)"):
        load_settings()


def test_an_unknown_variable_s_value_is_never_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGMCP_GENERATOR_APIKEY", "sk-very-secret")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert "RAGMCP_GENERATOR_API_KEY" in str(refused.value) and "sk-very-secret" not in str(refused.value)


@pytest.mark.parametrize("name", sorted(NOT_SETTINGS) + ["RAGMCP_TEST_FUZZ_REQUESTS"])
def test_the_projects_other_variables_are_not_settings_and_pass(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Variables that ragmcp's tests, tools and MCP client configurations read (never a setting)."""
    monkeypatch.setenv(name, "1")
    assert load_settings() == Settings()


def test_one_group_is_read_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function that needs one group (the index setup function: AwsSettings) reads its variables only."""
    monkeypatch.setenv("RAGMCP_OPENSEARCH_INDEX", "chunks-2")
    monkeypatch.setenv("RAGMCP_FTS_K", "not a number")  # another group's, broken: not read
    aws = load_group(AwsSettings)
    assert isinstance(aws, AwsSettings) and aws.opensearch_index == "chunks-2"
    monkeypatch.setenv("RAGMCP_EMBEDDING_DIMENSION", "100")
    with pytest.raises(SettingsError, match=r"RAGMCP_EMBEDDING_DIMENSION: .*allowed: one of 256, 512, 1024"):
        load_group(AwsSettings)
    monkeypatch.delenv("RAGMCP_EMBEDDING_DIMENSION")
    monkeypatch.setenv("RAGMCP_OPENSEARCH_INDX", "x")
    with pytest.raises(SettingsError, match=r"RAGMCP_OPENSEARCH_INDX \(did you mean RAGMCP_OPENSEARCH_INDEX\?\)"):
        load_group(AwsSettings)
