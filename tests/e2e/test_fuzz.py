"""JSON-RPC fuzzing of a real `ragmcp serve` on 127.0.0.1.

Hypothesis generates a bounded number of requests (MAX_REQUESTS, and no more than TIME_BUDGET
seconds of them): bytes that are not JSON, truncated and deeply nested JSON, JSON-RPC messages of
the wrong shape, batches, unknown methods, and calls of every tool (its inputSchema from
tools/list) with arguments mutated to wrong types, huge numbers, long strings (inside and beyond
the body cap), odd unicode (lone surrogates as JSON escapes and as raw bytes, RTL, zero-width,
NUL), nested junk, plus odd and oversized headers and wrong API keys.

Every answer must be a well-formed JSON-RPC object (an error, or a result for a call that
happened to be valid) with a JSON content type and a status below 500, and never an internal
error (-32603, or ragbox's -32002): those mean an exception the server did not expect. A
notification or a response message may be answered 202 with no body. Headers of more than 16 KiB
in all may be refused by uvicorn's HTTP parser before the app sees them (a plain 4xx, or the
connection dropped); a single header over 8 KiB that gets through is a JSON-RPC 431. A
deterministic probe besides sets every integer argument of every tool beyond 64 bits.

A second, deterministic run sends VOLUME requests (at least 5,000, within VOLUME_BUDGET seconds)
over one keep-alive connection, weighted toward what is cheap to answer so it stays fast: the
same kinds of malformed bodies, plus unknown paths under /mcp (/mcp/mindset/x, /mcp/, unknown
profiles), every HTTP method, x-session-tags nested up to 5,000 deep, headers just under and
over the 8 KiB cap, wrong keys, and one call in twenty a valid search. Every answer must be a
JSON-RPC object (or the documented empty 202 of a notification), never an HTTP 500, and an
error given after the key was read must carry the rate-limit headers.

Afterwards the server must still be up and the stored data unchanged. The write tools
(kb_addnote, kb_upload_*, kb_update_note, rag.admin.sync) are fuzzed too, but always with one
unknown argument besides the mutations: every tool's arguments forbid unknown fields, so such a
call is refused whatever else it holds, and nothing a valid write could legitimately change is
left out of the comparison. It covers the documents, chunks (with their embeddings), index
rows, document numbers, sources, jobs, upload sessions, users and keys in the SQLite database,
and every file in the documents folder and the server's data folder besides the database
itself. Left out: the audit trail (it grows with every call, by design), conversations
(query_knowledge with a conversation_id keeps the turn, by design) and the vector graph's file
(the chunks' vectors, compared in the database, saved by its worker when it catches up).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlean
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, RunningServer, start_server, stop_server

pytestmark = pytest.mark.e2e

MAX_REQUESTS = 400
MIN_REQUESTS = 300
TIME_BUDGET = 240.0
VOLUME = 5000
VOLUME_BUDGET = 420.0
BODY_CAP = 2 * 1024 * 1024
HEADER_CAP = 8192
PARSER_HEADER_BLOCK = 16 * 1024  # h11, uvicorn's HTTP parser, may refuse a bigger header block
INTERNAL_ERRORS = {-32603, -32002}
WRITE_TOOLS = {
    "kb_addnote",
    "kb_upload_start",
    "kb_upload_chunk",
    "kb_upload_finish",
    "kb_update_note",
    "rag.admin.sync",
}
UNKNOWN_ARGUMENT = "zz_fuzz_unknown"
KINDS = ("bytes", "truncated", "junk", "shape", "batch", "method", "call", "call", "call", "deep", "long", "headers")
HEADER_NAMES = (
    "x-session-tags",
    "x-user-id",
    "x-human-uid",
    "authorization",
    "x-api-key",
    "content-type",
    "accept",
    "x-big",
)
PATHS = ("/mcp", "/mcp/mindset", "/mcp/proxysql", "/mcp/kb", "/mcp/chat", "/mcp/ragbox")
SNAPSHOT_TABLES = (
    "documents",
    "idx_docs",
    "idx_doc_terms",
    "chunks",
    "doc_numbers",
    "sources",
    "jobs",
    "upload_sessions",
    "users",
    "api_keys",
)
ODD_TEXT = (
    "\u202e\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "a\u200b\u200c\u200d\u2060\ufeffb",
    "nul\x00byte",
    "\U0001f600\U0001f4a9" * 8,
    "e\u0301\u0302\u0303" * 10,
    "\uffff\ufffe\U0010ffff",
    "' OR 1=1 --",
    '"; DROP TABLE documents; --',
    'NEAR("a" "b") AND c* OR ^d',
    "../../../etc/passwd",
    "%s%n%x{0}",
    "",
    " ",
)


@dataclass
class FuzzServer:
    server: RunningServer = field(repr=False)
    key: str = field(repr=False)
    tools: list[dict[str, Any]] = field(repr=False)
    snapshot: dict[str, str]
    started: float
    sent: int = 0

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"FuzzServer({self.server.base}, sent={self.sent})")


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMCP_")}
    command = [sys.executable, "-m", "ragmcp.cli", "--data-dir", str(data_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def snapshot(data_dir: Path, docs: Path) -> dict[str, str]:
    """A digest of each table and file a request could change, except the audit trail and
    conversations (by name, so that a failure says which changed)."""
    digests: dict[str, str] = {}
    conn = sqlean.connect(str(data_dir / "ragmcp.db"))
    try:
        for table in SNAPSHOT_TABLES:
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            digest = hashlib.sha256(f"{len(rows)}\n".encode())
            for row in sorted(repr(r) for r in rows):
                digest.update(row.encode())
            digests[f"table {table}"] = digest.hexdigest()
    finally:
        conn.close()
    for root in (docs, data_dir):
        # The audit key comes with the first record, checkpoints follow; the vector graph is the chunks'
        # vectors (compared above) as its worker saves them, whenever it has caught up with the ingest;
        # the rate limits count every request.
        changing = ("ragmcp.db", "audit", "vectors.hnsw", "ratelimits.db")
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(changing)):
            digests[f"file {path}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzServer]:
    root = tmp_path_factory.mktemp("fuzz")
    docs = root / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    data_dir = root / "data"
    limits = "--rate 100000 --synthesis-rate 100000 --concurrent 50"
    created = cli(data_dir, *f"keys create --tenant default --scopes read,write,admin {limits}".split())
    assert created.returncode == 0, created.stderr
    key = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))
    server = start_server(docs, data_dir, ingest_timeout=300, open_access=False)
    try:
        listed = httpx.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"x-api-key": key},
            timeout=30,
        ).json()
        tools = listed["result"]["tools"]
        assert len(tools) >= 20
        yield FuzzServer(server, key, tools, snapshot(data_dir, docs), time.monotonic())
    finally:
        stop_server(server)


# --- values -------------------------------------------------------------------------------

huge_numbers = st.sampled_from(
    [10**30, -(10**30), 2**63, -(2**63) - 1, 2**63 - 1, 2**53 + 1, 10**400, 1e308, -1e308, 5e-324, -0.0, -1, 0]
)
odd_text = st.one_of(
    st.sampled_from(ODD_TEXT),
    st.text(max_size=40),
    st.text(st.characters(categories=["Cs", "Co", "Cc", "Cf", "Mn", "Zs"]), min_size=1, max_size=20),
    st.integers(8_000, 70_000).map(lambda n: "y" * n),
)
scalars = st.one_of(st.none(), st.booleans(), huge_numbers, st.integers(), st.floats(), odd_text)
junk = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(odd_text, kids, max_size=4), max_leaves=12
)
request_ids = st.one_of(st.integers(-(2**31), 2**31), st.text(max_size=20))


def encode(value: Any, raw_utf8: bool) -> bytes:
    """JSON with every non-ASCII character escaped (lone surrogates become \\udxxx escapes), or as
    raw UTF-8 where lone surrogates become bytes no UTF-8 decoder accepts."""
    if raw_utf8:
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


# --- plausible arguments from a tool's inputSchema --------------------------------------------


def resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def plausible(schema: dict[str, Any], root: dict[str, Any], required_only: bool = False) -> Any:
    """A value of the schema's shape (not necessarily valid: bounds and patterns are ignored); with
    required_only, an object holds only its required properties."""
    schema = resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return plausible(next(s for s in schema["anyOf"] if s.get("type") != "null"), root)
    kind = schema.get("type")
    if kind == "object":
        wanted = set(schema.get("required", ())) if required_only else set(schema.get("properties", {}))
        return {name: plausible(prop, root) for name, prop in schema.get("properties", {}).items() if name in wanted}
    if kind == "array":
        return [plausible(schema["items"], root)] if "items" in schema else []
    return {"string": "refund policy", "integer": 1, "number": 0.5, "boolean": True}.get(kind, "refund policy")


def kinds(schema: dict[str, Any], root: dict[str, Any]) -> set[str]:
    """The JSON types a schema admits."""
    schema = resolve(schema, root)
    if "anyOf" in schema:
        return {k for option in schema["anyOf"] for k in kinds(option, root)}
    return {schema["type"]} if "type" in schema else set()


def huge_arguments(tool: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each integer argument set to numbers SQLite cannot hold, each string argument to such digits."""
    schema = tool["inputSchema"]
    for name, prop in schema.get("properties", {}).items():
        admits = kinds(prop, schema)
        if "integer" in admits:
            yield from ((name, value) for value in (2**63, -(2**63) - 1, 10**30))
        if "string" in admits:
            yield name, "9" * 30


@st.composite
def tool_arguments(draw: st.DrawFn, tool: dict[str, Any]) -> Any:
    schema = tool["inputSchema"]
    arguments: Any = plausible(schema, schema)
    names = list(schema.get("properties", {}))
    for _ in range(draw(st.integers(0, 3))):
        mutation = draw(st.sampled_from(["junk", "huge", "drop", "extra", "nest", "whole"]))
        if mutation == "whole":
            arguments = draw(junk)
        elif not isinstance(arguments, dict):
            continue
        elif mutation == "junk" and names:
            arguments[draw(st.sampled_from(names))] = draw(junk)
        elif mutation == "huge" and names:
            arguments[draw(st.sampled_from(names))] = draw(huge_numbers)
        elif mutation == "drop" and arguments:
            arguments.pop(draw(st.sampled_from(sorted(arguments))))
        elif mutation == "extra":
            arguments[draw(odd_text)] = draw(junk)
        elif mutation == "nest" and names:
            arguments[draw(st.sampled_from(names))] = {"deep": [[[draw(junk)]]]}
    if tool["name"] in WRITE_TOOLS:
        arguments = {**arguments, UNKNOWN_ARGUMENT: True} if isinstance(arguments, dict) else {UNKNOWN_ARGUMENT: 1}
    return arguments


def as_object(arguments: Any, tool: dict[str, Any]) -> dict[str, Any]:
    """The arguments as an object to set one more property in; a write tool's keep their unknown one."""
    obj = arguments if isinstance(arguments, dict) else {}
    return {**obj, UNKNOWN_ARGUMENT: True} if tool["name"] in WRITE_TOOLS else obj


# --- requests ---------------------------------------------------------------------------------


@dataclass
class Fuzzed:
    kind: str
    path: str
    body: bytes
    headers: dict[str, bytes] = field(default_factory=dict)
    chunked: bool = False
    beyond_parser: bool = False

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        headers = {k: (v[:80], len(v)) for k, v in self.headers.items()}
        printer.text(
            f"Fuzzed({self.kind}, {self.path}, headers={headers}, body={self.body[:300]!r} ({len(self.body)} bytes))"
        )

    def message(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None

    def request_id(self) -> str | int | None:
        """The message's id, if it is one an answer may carry (a string or an integer)."""
        m = self.message()
        rid = m.get("id") if isinstance(m, dict) else None
        return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None

    def may_be_silent(self) -> bool:
        """A notification or a response message: JSON-RPC answers neither."""
        m = self.message()
        if not (isinstance(m, dict) and m.get("jsonrpc") == "2.0"):
            return False
        return (isinstance(m.get("method"), str) and "id" not in m) or "result" in m or "error" in m


def call_body(request_id: Any, tool: str, arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


@st.composite
def fuzzed_requests(draw: st.DrawFn, tools: list[dict[str, Any]]) -> Fuzzed:
    path = draw(st.sampled_from(PATHS))
    raw_utf8 = draw(st.booleans())
    tool = draw(st.sampled_from(tools))
    valid = call_body(draw(request_ids), tool["name"], plausible(tool["inputSchema"], tool["inputSchema"]))
    kind = draw(st.sampled_from(KINDS))
    if kind == "bytes":
        body = draw(st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"\xff\xfe{}", b"\xed\xa0\x80", b"{"])))
        return Fuzzed(kind, path, body)
    if kind == "truncated":
        full = encode(valid, raw_utf8)
        return Fuzzed(kind, path, full[: draw(st.integers(0, len(full) - 1))])
    if kind == "junk":
        return Fuzzed(kind, path, encode(draw(junk), raw_utf8))
    if kind == "shape":
        message: dict[str, Any] = {}
        for name, values in (
            ("jsonrpc", st.sampled_from(["2.0", "1.0", 2.0, None, "2.0 "])),
            ("id", st.one_of(request_ids, junk)),
            ("method", st.one_of(st.sampled_from(["tools/call", "tools/list", "initialize", "ping"]), junk)),
            ("params", junk),
            ("result", junk),
            ("error", junk),
        ):
            if draw(st.booleans()):
                message[name] = draw(values)
        return Fuzzed(kind, path, encode(message, raw_utf8))
    if kind == "batch":
        items = st.one_of(st.just(valid), st.builds(call_body, request_ids, st.just(tool["name"]), junk), junk)
        return Fuzzed(kind, path, encode(draw(st.lists(items, max_size=4)), raw_utf8))
    if kind == "method":
        message = {"jsonrpc": "2.0", "method": draw(st.one_of(odd_text, st.sampled_from(["resources/list", "x/y"])))}
        if draw(st.booleans()):
            message["id"] = draw(request_ids)
        if draw(st.booleans()):
            message["params"] = draw(junk)
        return Fuzzed(kind, path, encode(message, raw_utf8))
    if kind == "call":
        body = call_body(valid["id"], tool["name"], draw(tool_arguments(tool)))
        return Fuzzed(kind, path, encode(body, raw_utf8))
    if kind == "deep":
        depth = draw(st.integers(1, 5000))
        nest = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        inner = (nest[0] * depth + "1" + nest[1] * depth).encode()
        arguments = as_object(draw(tool_arguments(tool)), tool)
        arguments[draw(st.sampled_from([*tool["inputSchema"].get("properties", {}), "x"]))] = "__DEEP__"
        body = encode(call_body(valid["id"], tool["name"], arguments), raw_utf8).replace(b'"__DEEP__"', inner)
        return Fuzzed(kind, path, body if draw(st.booleans()) else inner)
    if kind == "long":
        size = draw(st.sampled_from([100_000, 1_000_000, BODY_CAP - 4096, BODY_CAP + 1, 3 * BODY_CAP]))
        arguments = as_object(draw(tool_arguments(tool)), tool)
        arguments[draw(st.sampled_from([*tool["inputSchema"].get("properties", {}), "x"]))] = "z" * size
        body = encode(call_body(valid["id"], tool["name"], arguments), raw_utf8)
        return Fuzzed(kind, path, body, chunked=draw(st.booleans()))
    headers: dict[str, bytes] = {}
    header_text = st.binary(min_size=1, max_size=200).map(
        lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F).strip() or b"x"
    )
    for name in draw(st.sets(st.sampled_from(HEADER_NAMES), min_size=1)):
        if name == "x-big" or draw(st.integers(0, 5)) == 0:
            size = draw(st.sampled_from([HEADER_CAP - 100, HEADER_CAP + 1, 20_000, 60_000, 300_000]))
            headers[name] = b"h" * size
        elif name == "x-session-tags":
            headers[name] = draw(st.one_of(header_text, junk.map(lambda v: json.dumps(v).encode())))
        elif name == "authorization":
            headers[name] = draw(st.sampled_from([b"Bearer", b"Bearer rmcp_live_" + b"0" * 64, b"Basic eA==", b"x"]))
        else:
            headers[name] = draw(header_text)
    beyond = sum(len(k) + len(v) for k, v in headers.items()) > PARSER_HEADER_BLOCK - 1024
    return Fuzzed(kind, path, encode(valid, raw_utf8), headers=headers, beyond_parser=beyond)


def send(client: httpx.Client, target: FuzzServer, fuzzed: Fuzzed) -> httpx.Response:
    headers = {"x-api-key": target.key.encode(), "content-type": b"application/json", **fuzzed.headers}
    content: Any = fuzzed.body
    if fuzzed.chunked:
        body = fuzzed.body
        content = (body[i : i + 65536] for i in range(0, len(body), 65536))
    return client.post(target.server.base + fuzzed.path, content=content, headers=headers)


def check(fuzzed: Fuzzed, response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code == 202:
        assert fuzzed.may_be_silent() and response.content == b"", response.text[:500]
        return
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    answer = response.json()
    assert isinstance(answer, dict) and answer.get("jsonrpc") == "2.0", answer
    assert ("result" in answer) != ("error" in answer), answer
    assert answer.get("id") is None or isinstance(answer["id"], str | int), answer
    expected_id = fuzzed.request_id()
    if "result" in answer:
        assert response.status_code == 200 and isinstance(answer["result"], dict)
        assert expected_id is not None and answer["id"] == expected_id, answer
        return
    error = answer["error"]
    assert isinstance(error, dict) and isinstance(error.get("code"), int) and not isinstance(error["code"], bool)
    assert isinstance(error.get("message"), str) and error["message"], error
    assert error["code"] not in INTERNAL_ERRORS, error
    assert "Traceback" not in error["message"], error
    if answer.get("id") is not None:
        assert answer["id"] == expected_id, answer
    if len(fuzzed.body) > BODY_CAP:
        assert response.status_code == 413 and error["code"] == -32600, error
    elif max((len(v) for v in fuzzed.headers.values()), default=0) > HEADER_CAP:
        assert response.status_code == 431 and error["code"] == -32600, error


@settings(
    max_examples=MAX_REQUESTS,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(data=st.data())
def test_every_fuzzed_request_gets_a_well_formed_json_rpc_answer(fuzz_server: FuzzServer, data: st.DataObject) -> None:
    if time.monotonic() - fuzz_server.started > TIME_BUDGET:
        return  # bounded in time; the next test fails if fewer than MIN_REQUESTS were sent
    fuzzed = data.draw(fuzzed_requests(fuzz_server.tools))
    fuzz_server.sent += 1
    with httpx.Client(timeout=60) as client:
        try:
            response = send(client, fuzz_server, fuzzed)
        except httpx.TransportError:
            assert fuzzed.beyond_parser, "the server dropped a connection it should have answered"
        else:
            if fuzzed.beyond_parser and not response.headers.get("content-type", "").startswith("application/json"):
                assert 400 <= response.status_code < 500  # refused by the HTTP parser, before the app
            else:
                check(fuzzed, response)
    assert fuzz_server.server.process.poll() is None, "the server died"


# --- volume: 5,000 requests, deterministic ---------------------------------------------------

VOLUME_PATHS = (*PATHS, "/mcp/mindset/x", "/mcp/", "/mcp/nope", "/mcp/proxysql/rag.admin.sync")
OTHER_METHODS = ("GET", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD")


def nested(rng: random.Random, depth: int) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ('["x",', "]")])
    return opener * depth + '"t"' + closer * depth


def volume_request(rng: random.Random, tools: list[dict[str, Any]]) -> tuple[str, Fuzzed]:
    """One request of the volume run: (HTTP method, request)."""
    path = rng.choice(VOLUME_PATHS)
    tool = rng.choice(tools)
    schema = tool["inputSchema"]
    arguments: Any = plausible(schema, schema)
    if tool["name"] in WRITE_TOOLS:
        arguments = {**arguments, UNKNOWN_ARGUMENT: True}
    request_id = rng.choice([rng.randint(-(2**31), 2**31), f"v{rng.randint(0, 10**6)}"])
    valid = call_body(request_id, tool["name"], arguments)
    kind = rng.choices(
        ["method", "bytes", "truncated", "shape", "deep", "batch", "header", "wrongtype", "notify", "valid"],
        weights=[6, 10, 10, 12, 8, 6, 20, 18, 4, 6],
    )[0]
    headers: dict[str, bytes] = {}
    body = json.dumps(valid).encode()
    if kind == "method":
        return rng.choice(OTHER_METHODS), Fuzzed(kind, path, body)
    if kind == "bytes":
        body = rng.randbytes(rng.randint(0, 200))
    elif kind == "truncated":
        body = body[: rng.randint(0, len(body) - 1)]
    elif kind == "shape":
        message = {"jsonrpc": rng.choice(["2.0", "1.0", None, 2]), "id": rng.choice([request_id, None, [1], {}])}
        message["method"] = rng.choice(["tools/call", "tools/list", "ping", "initialize", 7, None, "x/y"])
        message["params"] = rng.choice([{}, [], "p", None, {"name": 5}, {"name": tool["name"], "arguments": []}])
        body = json.dumps({k: v for k, v in message.items() if rng.random() < 0.8}).encode()
    elif kind == "deep":
        body = json.dumps(valid).encode().replace(b'"refund policy"', nested(rng, rng.randint(100, 5000)).encode(), 1)
    elif kind == "batch":
        body = json.dumps([valid] * rng.randint(0, 3)).encode()
    elif kind == "header":
        name = rng.choice(["x-session-tags", "x-user-id", "x-human-uid", "authorization", "x-api-key", "accept"])
        value = rng.choice(
            [
                nested(rng, rng.randint(1000, 3000)),
                "h" * rng.choice([HEADER_CAP - 100, HEADER_CAP + 1]),
                "Bearer rmcp_live_" + "0" * 64,
                '["a", 1, null]',
                r"\u0000\ud800",
                "",
            ]
        )
        headers[name] = value.encode()
    elif kind == "wrongtype" and isinstance(arguments, dict):
        name = rng.choice([*arguments, "zz"])
        arguments[name] = rng.choice([None, [], {}, -1, 10**30, "", True, "x" * 20000, [[["deep"]]]])
        body = json.dumps(call_body(request_id, tool["name"], arguments)).encode()
    elif kind == "notify":
        body = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    elif kind == "valid":
        path = rng.choice(["/mcp", "/mcp/mindset"])
        query = {"search_phrases": [rng.choice(["getting started", "security", "release notes", "glossary"])]}
        body = json.dumps(call_body(request_id, "rag_search", query)).encode()
    return "POST", Fuzzed(kind, path, body, headers=headers)


def check_volume(method: str, fuzzed: Fuzzed, response: httpx.Response) -> None:
    assert response.status_code < 500, (method, fuzzed.path, response.status_code, response.text[:300])
    if method == "HEAD":
        assert response.status_code in (404, 405)
        return
    known = fuzzed.path in PATHS
    if method != "POST" or not known:
        assert response.status_code in (404, 405), (method, fuzzed.path, response.status_code)
        answer = response.json()
        assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == -32600, answer
        return
    check(fuzzed, response)
    answer = response.json() if response.content else {}
    if "error" in answer and answer["error"]["code"] not in (-32700, -32600, -32000):  # given after the key was read
        assert "x-ratelimit-limit" in response.headers, (fuzzed.kind, answer)


def test_five_thousand_requests_of_every_kind_get_json_rpc_answers(fuzz_server: FuzzServer) -> None:
    rng = random.Random(20261123)
    started = time.monotonic()
    statuses: dict[int, int] = {}
    sent = 0
    with httpx.Client(timeout=60) as client:
        while sent < VOLUME and time.monotonic() - started < VOLUME_BUDGET:
            method, fuzzed = volume_request(rng, fuzz_server.tools)
            headers = {"x-api-key": fuzz_server.key.encode(), "content-type": b"application/json", **fuzzed.headers}
            url = fuzz_server.server.base + fuzzed.path
            response = client.request(method, url, content=fuzzed.body, headers=headers)
            sent += 1
            fuzz_server.sent += 1
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            check_volume(method, fuzzed, response)
    assert sent >= VOLUME, f"only {sent} requests in {VOLUME_BUDGET} s"
    assert statuses.get(200, 0) >= VOLUME // 40 and not any(code >= 500 for code in statuses), statuses
    assert fuzz_server.server.process.poll() is None, "the server died"


def test_no_tool_fails_on_numbers_beyond_64_bits(fuzz_server: FuzzServer) -> None:
    """Every integer argument of every tool at 2**63, -2**63-1 and 10**30 (and every string argument
    as 30 digits): an answer or -32602, never an internal error."""
    failures = []
    with httpx.Client(timeout=60) as client:
        for tool in fuzz_server.tools:
            for name, value in huge_arguments(tool):
                schema = tool["inputSchema"]
                arguments = {**plausible(schema, schema, required_only=True), name: value}
                if tool["name"] in WRITE_TOOLS:
                    arguments[UNKNOWN_ARGUMENT] = True
                fuzzed = Fuzzed("huge", "/mcp", encode(call_body(1, tool["name"], arguments), False))
                fuzz_server.sent += 1
                answer = send(client, fuzz_server, fuzzed).json()
                if answer.get("error", {}).get("code") in INTERNAL_ERRORS:
                    failures.append(f"{tool['name']} {name}={value!r}: {answer['error']}")
    assert failures == [], "\n".join(failures)


def test_the_server_stays_up_and_the_stored_data_is_unchanged(fuzz_server: FuzzServer) -> None:
    assert fuzz_server.sent >= MIN_REQUESTS
    health = fuzz_server.server.health()
    assert health["status"] == "ok" and health["problems"] == [] and health["ingest"]["state"] == "idle"
    assert snapshot(fuzz_server.server.data_dir, fuzz_server.server.docs) == fuzz_server.snapshot
    search = httpx.post(
        fuzz_server.server.base + "/mcp/mindset",
        json={
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "rag_search", "arguments": {"search_phrases": ["getting started"]}},
        },
        headers={"authorization": f"Bearer {fuzz_server.key}"},
        timeout=60,
    )
    assert search.status_code == 200 and search.json()["result"]["segments"], search.text[:500]
