"""What POST /mcp costs the whole HTTP app (middleware, the SDK's transport and server, the tool) on the
in-memory fakes: no model, no index file, the contracts' small corpus (tests/contract_examples.py).
`rag_search` (mindset's, a lifted tool) is called `--requests` times after 50 warm calls; prints the
process CPU (every thread) and wall time per request, the Starlette TestClient's own work included.

    python -m tests.measure.http_cost [--requests 300] [--label NAME]   # from the repo root

To compare two trees side by side, run this file by its path with the other tree's PYTHONPATH
(`<tree>/layers/ragmcp:<tree>/bench:<tree>`), alternating the two.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from ragmcp.bootstrap import build_registry, build_services
from ragmcp.http import create_app
from tests import fakes
from tests.contract_examples import USER, write_corpus

CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "rag_search", "arguments": {"search_phrases": ["paid time off", "leave policy"]}},
}
HEADERS = {"accept": "application/json, text/event-stream", "x-user-id": USER}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--label", default="this tree")
    args = parser.parse_args()
    adapters = fakes.adapters()
    services = build_services(fakes.settings(Path(tempfile.mkdtemp()) / "data"), adapters)
    write_corpus(adapters, services)
    with TestClient(create_app(services, build_registry(services)), base_url="http://127.0.0.1") as http:
        for _ in range(50):
            assert http.post("/mcp", json=CALL, headers=HEADERS).status_code == 200
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(args.requests):
            http.post("/mcp", json=CALL, headers=HEADERS)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        size = len(http.post("/mcp", json=CALL, headers=HEADERS).content)
    per = 1000 / args.requests
    print(f"{args.label}: {args.requests} requests, {cpu * per:.3f} ms CPU/request, {wall * per:.3f} ms wall,", end=" ")
    print(f"answer {size} bytes")


if __name__ == "__main__":
    main()
