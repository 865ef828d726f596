"""ragmcp's development tools: `ragmcp eval`, `eval-qa`, `eval-parse`, `eval-guards` and `ragmcp bench`,
the LanceDB peer and the AWS emulator the Lambda benchmarks run on. Installed beside the library by
`pip install -e '.[test]'` or `'.[bench]'`; never shipped in a Lambda function or the layer."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository checkout this package sits in (bench/ragmcp_bench/): the functions, the layer and
the LocalStack provisioning script the Lambda benchmarks use."""
