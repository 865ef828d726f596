"""The synthesis state machine's tasks: each event names a step and carries its inputs; the result
is the step's output model as JSON (the state machine puts it beside the request)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from ragmcp.synthesis.models import Draft, Evidence, GateDecision, SynthesisRequest
from ragmcp.synthesis.service import SynthesisSteps


class RetrieveTask(BaseModel):
    step: Literal["retrieve"]
    request: SynthesisRequest


class GateTask(BaseModel):
    step: Literal["gate"]
    evidence: Evidence


class GenerateTask(BaseModel):
    step: Literal["generate"]
    request: SynthesisRequest
    evidence: Evidence


class CiteTask(BaseModel):
    step: Literal["cite"]
    evidence: Evidence
    decision: GateDecision
    draft: Draft | None = None


Task = Annotated[RetrieveTask | GateTask | GenerateTask | CiteTask, Field(discriminator="step")]
TASK = TypeAdapter(Task)


def run_task(steps: SynthesisSteps, event: dict[str, Any]) -> dict[str, Any]:
    task = TASK.validate_python(event)
    match task:
        case RetrieveTask():
            result: BaseModel = steps.evidence(task.request)
        case GateTask():
            result = steps.decide(task.evidence)
        case GenerateTask():
            result = steps.draft(task.evidence, task.request.style, task.request.history)
        case CiteTask():
            result = steps.cite(task.evidence, task.decision, task.draft)
    return result.model_dump(mode="json")
