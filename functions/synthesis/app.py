"""The synthesis state machine's Lambda task: runs the step the event names (ragmcp.synthesis.tasks)."""

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from ragmcp.bootstrap import SYNTHESIS_STEPS_SETTINGS, build_synthesis_steps
from ragmcp.logs import configure_lambda
from ragmcp.settings import load_groups
from ragmcp.synthesis.service import SynthesisSteps
from ragmcp.synthesis.tasks import run_task

logger = Logger()
configure_lambda(logger)
tracer = Tracer()
metrics = Metrics()


@cache
def steps() -> SynthesisSteps:
    return build_synthesis_steps(load_groups(*SYNTHESIS_STEPS_SETTINGS))  # the groups of settings it uses


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return run_task(steps(), event)
