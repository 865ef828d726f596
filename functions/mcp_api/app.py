"""API Gateway (HTTP API) -> Mangum -> the FastAPI app of ragmcp.http.

The services, the tool registry and the app are built during init, so the SnapStart snapshot holds
them and a restored function answers without building anything; init makes no network call (the
search index is checked on first use). Each restored instance makes its own entropy (`after_restore`:
the console's signing secret unless RAGMCP_CONSOLE_SECRET names one, Python's `random` state behind
retry jitter), as AWS's SnapStart guidance asks. The audit checkpoint is written by the handler when
due: Lambda freezes the process between invocations, so a background thread may never run.

The console function (template.yaml: ConsoleFunction) runs this same code under its own role.
"""

import random
import secrets
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from mangum import Mangum

from ragmcp.bootstrap import Services, build_registry, build_services
from ragmcp.http import create_app
from ragmcp.logs import configure_lambda
from ragmcp.settings import Settings

logger = Logger()
configure_lambda(logger)
tracer = Tracer(patch_modules=("botocore", "requests"))
"""X-Ray traces the calls this function makes: AWS APIs (botocore) and OpenSearch (opensearch-py over requests).
By default Tracer patches every library the X-Ray SDK supports, importing each one installed at init."""
metrics = Metrics()


services: Services = build_services(Settings())
app = create_app(services, build_registry(services))
asgi = Mangum(app, lifespan="off")


def after_restore() -> None:
    """What SnapStart's runtime calls in each instance restored from the snapshot."""
    random.seed()
    if services.settings.security.console_secret is None:
        app.state.console_sessions.secret = secrets.token_bytes(32)


try:
    from snapshot_restore_py import register_after_restore  # the Lambda Python runtime's SnapStart hooks
except ImportError:  # not on Lambda: nothing is ever restored
    pass
else:
    register_after_restore(after_restore)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = asgi(event, context)
    services.audit.checkpoints.flush_if_due()
    return response
