"""The synthesis state machine's tasks: each event names a step and carries its inputs; the result
is the step's output model as JSON (the state machine puts it beside the request).

The evidence (retrieve's result, every later step's input) and the answer (cite's result, the
execution's output) go through the stash and the state data carries their `Stashed` reference:
Step Functions limits each state's input and output to 256 KB, which 20 long passages exceed
(stash.py). Without a stash (no staging area) they stay inline."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from ragmcp.synthesis.models import Answer, Draft, Evidence, GateDecision, SynthesisRequest
from ragmcp.synthesis.service import SynthesisSteps
from ragmcp.synthesis.stash import PassageStash


class Stashed(BaseModel):
    """A step's result kept in the synthesis stash; the state machine carries this reference."""

    ref: str


class RetrieveTask(BaseModel):
    step: Literal["retrieve"]
    request: SynthesisRequest


class GateTask(BaseModel):
    step: Literal["gate"]
    evidence: Evidence | Stashed


class GenerateTask(BaseModel):
    step: Literal["generate"]
    request: SynthesisRequest
    evidence: Evidence | Stashed


class CiteTask(BaseModel):
    step: Literal["cite"]
    evidence: Evidence | Stashed
    decision: GateDecision
    draft: Draft | None = None


Task = Annotated[RetrieveTask | GateTask | GenerateTask | CiteTask, Field(discriminator="step")]
TASK = TypeAdapter(Task)


def run_task(steps: SynthesisSteps, event: dict[str, Any]) -> dict[str, Any]:
    task = TASK.validate_python(event)
    match task:
        case RetrieveTask():
            result: BaseModel = by_reference(steps, steps.evidence(task.request))
        case GateTask():
            result = steps.decide(evidence_of(steps, task.evidence))
        case GenerateTask():
            result = steps.draft(evidence_of(steps, task.evidence), task.request.style, task.request.history)
        case CiteTask():
            result = by_reference(steps, steps.cite(evidence_of(steps, task.evidence), task.decision, task.draft))
    return result.model_dump(mode="json")


def by_reference(steps: SynthesisSteps, result: BaseModel) -> BaseModel:
    return Stashed(ref=steps.stash.keep(result)) if steps.stash is not None else result


def evidence_of(steps: SynthesisSteps, evidence: Evidence | Stashed) -> Evidence:
    if isinstance(evidence, Evidence):
        return evidence
    if steps.stash is None:
        raise ValueError("the evidence is stashed, but this function has no stash")
    return steps.stash.load(evidence.ref, Evidence)


def answer_of(output: str, stash: PassageStash) -> Answer:
    """The execution's output: the answer, or its stash reference (the runner reads it back)."""
    parsed = TypeAdapter(Answer | Stashed).validate_json(output)
    return stash.load(parsed.ref, Answer) if isinstance(parsed, Stashed) else parsed
