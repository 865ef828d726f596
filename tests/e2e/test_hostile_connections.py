"""Slow and malformed clients against a real `ragmcp serve` on 127.0.0.1 (issue 29): they cannot
starve it, make it answer 500 or grow its log without bound.

- Headers that never end (sent in part, trickled a byte at a time, or not at all) and a body that
  never ends are answered 408 and the connection closed within the timeouts.
- A body over the limit gets a 413 the client can read, even with `connection: close`.
- SLOW_CONNECTIONS idle slow-header connections (2,000 here, more than the server's 1,024 files;
  `make soak-http` opens 20,000), opened 1,000 a second per process, leave /healthz answering
  within a second, every probe; the connections closed are logged as one line a second.
- A flood of malformed requests writes a few log lines and a count, not a line each.
- A fuzz of FUZZ_REQUESTS requests (300 here, 12,000 in `make soak-http`): invalid UTF-8, lone
  surrogates (escaped and raw), with a missing, bad or good key and an echoed id, interleaved with
  slow headers and slow bodies: never an HTTP 500, always a JSON-RPC answer with a body; the
  audit trail still verifies.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import os
import random
import resource
import shutil
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.conftest import REPO, RunningServer, start_server, stop_server
from tests.e2e.test_fuzz import cli

pytestmark = pytest.mark.e2e

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 3.0
SERVER_FILES = int(os.environ.get("RAGMCP_TEST_SERVER_FILES", "1024"))
"""The server's open files limit (0: the test's own); it starts with the cap below it."""
SLOW_CONNECTIONS = int(os.environ.get("RAGMCP_TEST_SLOW_CONNECTIONS", "2000"))
FUZZ_REQUESTS = int(os.environ.get("RAGMCP_TEST_FUZZ_REQUESTS", "300"))
OPEN_RATE = 1000
"""Slow connections opened a second: a slowloris needs no more. (A flood of connections as fast as
the machine can open them is another attack: each costs the server about 0.2 ms of CPU.)"""
WAVE = 100
PER_PROCESS = 10_000


@dataclass
class Hostile:
    server: RunningServer = field(repr=False)
    key: str = field(repr=False)

    @property
    def port(self) -> int:
        return int(self.server.base.rsplit(":", 1)[1])

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def log(self) -> str:
        return (self.server.data_dir.parent / f"server-{self.port}.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    root = tmp_path_factory.mktemp("hostile")
    docs = root / "docs"
    shutil.copytree(REPO / "samples" / "docs", docs)
    created = cli(root / "data", *"keys create --tenant default --rate 1000000 --concurrent 100".split())
    assert created.returncode == 0, created.stderr
    key = next(line.split()[-1] for line in created.stdout.splitlines() if line.startswith("secret:"))
    settings = {"RAGMCP_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT), "RAGMCP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT)}
    server = start_server(
        docs, root / "data", ingest_timeout=300, open_access=False, settings=settings, open_files=SERVER_FILES or None
    )
    try:
        yield Hostile(server, key)
    finally:
        stop_server(server)


def answer_of(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection (or `within` seconds pass), and when."""
    started = time.monotonic()
    sock.settimeout(within)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server neither answered nor closed within {within} s (got {received[:80]!r})")
    except ConnectionResetError:
        pass
    return received, time.monotonic() - started


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_headers_that_never_end_are_answered_408_and_closed(hostile: Hostile) -> None:
    silent = hostile.connect()
    partial = hostile.connect()
    partial.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: applica")
    answer, took = answer_of(partial, HEADER_TIMEOUT + 3)
    assert status_of(answer) == 408 and took <= HEADER_TIMEOUT + 1.5, (answer, took)
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == -32000
    nothing, _ = answer_of(silent, 3)  # sent nothing: closed without a word, as a kept-alive connection is
    assert nothing == b""
    trickle = hostile.connect()
    trickle.settimeout(0.2)
    started, received = time.monotonic(), b""
    while time.monotonic() - started < HEADER_TIMEOUT + 3 and not received:
        try:
            trickle.sendall(b"X")  # a byte every 0.2 s never completes a header
            received = trickle.recv(1024)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            break
    assert status_of(received) == 408 and time.monotonic() - started <= HEADER_TIMEOUT + 1.5, received


def test_a_body_that_never_ends_is_answered_408_in_json_rpc(hostile: Hostile) -> None:
    slow = hostile.connect()
    head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    slow.sendall(f"{head}x-api-key: {hostile.key}\r\n\r\n{{\"jsonrpc\"".encode())
    answer, took = answer_of(slow, BODY_TIMEOUT + 3)
    assert status_of(answer) == 408 and took <= BODY_TIMEOUT + 1.5, (answer, took)
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == -32000
    assert httpx.get(f"{hostile.server.base}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("close", [True, False])
def test_a_body_over_the_limit_gets_a_413_the_client_can_read(hostile: Hostile, close: bool) -> None:
    size = 20 * 1024 * 1024
    sock = hostile.connect()
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n"
    sock.sendall((head + ("Connection: close\r\n" if close else "") + "\r\n").encode())
    chunk = b"x" * 65536
    for _ in range(size // len(chunk)):
        sock.sendall(chunk)  # never reset: what is sent after the answer is read and dropped
    answer = sock.recv(65536)
    assert status_of(answer) == 413, answer[:200]
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"]["message"] == "Request body too large"


async def _open_slow_connections(port: int, count: int, hold: float) -> int:
    """Open `count` connections that each send the start of a request and then nothing, OPEN_RATE
    a second in waves, and hold them `hold` seconds; how many were opened (the server may close
    them past its cap)."""
    held: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        held.append(writer)

    for start in range(0, count, WAVE):
        waited = asyncio.sleep(WAVE / OPEN_RATE)
        await asyncio.gather(waited, *(one() for _ in range(min(WAVE, count - start))))
    await asyncio.sleep(hold)
    for writer in held:
        writer.close()
    return len(held)


def _slow_connections_process(port: int, count: int, hold: float, opened: multiprocessing.Queue) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 200)), hard))
    opened.put(asyncio.run(_open_slow_connections(port, count, hold)))


def test_idle_slow_connections_cannot_starve_healthz_or_search(hostile: Hostile) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard >= PER_PROCESS + 200, f"the hard open files limit is {hard}: raise ulimit -n"
    # The connections come from processes of their own (PER_PROCESS each, within their file limit),
    # so the probe's timings are the server's; spawned, as a forked child's copy-on-write slows
    # this process for a while.
    context = multiprocessing.get_context("spawn")
    opened: multiprocessing.Queue = context.Queue()
    shares = [min(PER_PROCESS, SLOW_CONNECTIONS - start) for start in range(0, SLOW_CONNECTIONS, PER_PROCESS)]
    openers = [
        context.Process(target=_slow_connections_process, args=(hostile.port, share, 3.0, opened)) for share in shares
    ]
    search = {"name": "kb_search", "arguments": {"query": "how do I get started"}}
    headers = {"x-api-key": hostile.key, "accept": "application/json, text/event-stream", "connection": "close"}
    timings: dict[str, list[float]] = {"/healthz": [], "search": []}
    failures: list[str] = []

    def probe(client: httpx.Client, what: str) -> None:
        asked = time.monotonic()
        try:
            if what == "search":
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": search}
                answer = client.post(f"{hostile.server.base}/mcp/kb", json=body, headers=headers)
                ok = answer.status_code == 200 and "result" in answer.json()
            else:
                ok = client.get(f"{hostile.server.base}/healthz", headers={"connection": "close"}).status_code == 200
        except httpx.HTTPError as exc:
            ok = False
            failures.append(f"{what} at {time.monotonic() - started:.1f} s: {exc!r}")
        timings[what].append(time.monotonic() - asked if ok else float("inf"))

    with httpx.Client(timeout=5) as client:
        probe(client, "search")  # its phrase's vector is cached from here on: the probes time the server, not the model
        timings["search"].clear()
        started = time.monotonic()
        for opener in openers:
            opener.start()
        for number in itertools.count():
            if not any(opener.is_alive() for opener in openers):
                break
            probe(client, "search" if number % 5 == 4 else "/healthz")
            time.sleep(0.1)
    for opener in openers:
        opener.join()
    total = sum(opened.get(timeout=5) for _ in openers)
    figures = ", ".join(
        f"{what} probes: {len(took)}, median {statistics.median(took):.3f} s, max {max(took):.3f} s,"
        f" over 1 s: {sum(t >= 1.0 for t in took)}"
        for what, took in timings.items()
    )
    print(f"slow connections opened: {total} of {SLOW_CONNECTIONS} in {time.monotonic() - started:.1f} s; {figures}")
    assert total >= SLOW_CONNECTIONS * 0.9
    assert not failures, failures
    for what, took in timings.items():
        assert len(took) >= 3 and max(took) < 1.0, (what, [round(t, 3) for t in took])
    log = hostile.log()
    assert "out of system resource" not in log and "Too many open files" not in log
    closed = [line for line in log.splitlines() if "connections in the last 1 s:" in line]
    assert closed and len(closed) <= 5 + 2 * 5, closed  # one line a second, 5 a minute at most, and their summaries
    assert any(", 0 closed to make room" not in line for line in closed), closed  # past the cap, some were


def test_a_flood_of_malformed_requests_writes_a_few_log_lines(hostile: Hostile) -> None:
    before = hostile.log().count("Invalid HTTP request received.")
    for _ in range(200):
        sock = hostile.connect()
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer, _ = answer_of(sock, 5)
        assert status_of(answer) == 400
        sock.close()
    time.sleep(0.5)
    assert hostile.log().count("Invalid HTTP request received.") - before <= 5


# --- the fuzz -----------------------------------------------------------------------------


def _fuzz_body(rng: random.Random) -> bytes:
    request_id: object = rng.choice([1, -7, "id-\ud800", "\udfff", "ok", 2**70, None])
    method = rng.choice(["tools/list", "tools/call", "resources/list", "initialize", "nope"])
    text = rng.choice(["\ud800", "a\udbff", "\udc00z", "fine", "\U0001f600", "\x00", "\u202e"])
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if method == "tools/call":
        tool = rng.choice(["kb_search", "rag_search", "kb_get", "get_document", text])
        message["params"] = {"name": tool, "arguments": {"query": text, "search_phrases": [text], text: text}}
    encoded = json.dumps(message, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    mangle = rng.random()
    if mangle < 0.15:  # invalid UTF-8 somewhere
        at = rng.randrange(len(encoded))
        encoded = encoded[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80"]) + encoded[at:]
    elif mangle < 0.2:
        encoded = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    elif mangle < 0.25:
        encoded = json.dumps(message).encode("utf-16", "surrogatepass")
    return encoded


def _slow_client(port: int, kind: str, results: list[tuple[str, int]]) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == "header":
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: \xed\xa0\x80")
        within = HEADER_TIMEOUT + 3
    else:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\n{\"id\":\"\\ud800")
        within = BODY_TIMEOUT + 3
    answer, _ = answer_of(sock, within)
    results.append((kind, status_of(answer)))
    sock.close()


def test_a_fuzz_of_hostile_bytes_and_slow_clients_gets_no_500(hostile: Hostile) -> None:
    rng = random.Random(29)
    statuses: Counter[int] = Counter()
    slow: list[tuple[str, int]] = []
    slow_threads: list[threading.Thread] = []
    paths = ["/mcp", "/mcp/kb", "/mcp/mindset", "/mcp/ragbox", "/mcp/proxysql", "/mcp/chat"]
    with httpx.Client(base_url=hostile.server.base, timeout=30) as client:
        for number in range(FUZZ_REQUESTS):
            if number % 100 == 0:
                for kind in ("header", "body"):
                    thread = threading.Thread(target=_slow_client, args=(hostile.port, kind, slow))
                    thread.start()
                    slow_threads.append(thread)
            headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
            key = rng.choice(["none", "bad", "good", "good"])
            if key != "none":
                headers["x-api-key"] = hostile.key if key == "good" else "rmcp_live_" + "1" * 64
            answer = client.post(rng.choice(paths), content=_fuzz_body(rng), headers=headers)
            statuses[answer.status_code] += 1
            assert answer.status_code < 500, (answer.status_code, answer.text[:300])
            if answer.status_code != 202:
                message = answer.json()
                assert message["jsonrpc"] == "2.0" and ("error" in message or "result" in message), message
                assert message.get("error", {}).get("code") not in (-32603, -32002), message
    for thread in slow_threads:
        thread.join()
    by_status = dict(sorted(statuses.items()))
    print(f"fuzzed requests: {sum(statuses.values())}, by status: {by_status}; slow clients: {Counter(slow)}")
    assert sum(statuses.values()) == FUZZ_REQUESTS and statuses[500] == 0
    assert sorted(set(slow)) == [("body", 408), ("header", 408)], slow
    verified = cli(hostile.server.data_dir, "audit", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
