"""Measurements that run the production code on the tests' doubles (tests/fakes.py, the moto harness, the
OpenSearch double): they live beside those doubles, so the development tools (ragmcp_bench) and the runtime
library (ragmcp) never import tests/ (import-linter keeps it, pyproject's [tool.importlinter])."""
