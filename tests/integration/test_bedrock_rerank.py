"""Optional Bedrock reranking (bedrock-agent-runtime's Rerank API) between retrieval and the gate.

Bedrock is not emulated: botocore's Stubber checks every request against the service model and
answers as Rerank does (results best first, each naming the index of its source)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from ragmcp.adapters.aws.bedrock import BedrockReranker, rerank_request
from ragmcp.bootstrap import _aws_reranker, build_services
from ragmcp.domain.errors import RagError
from ragmcp.domain.models import Principal
from ragmcp.settings import Settings
from ragmcp.synthesis.models import Passage, SynthesisRequest

REGION = "us-west-2"
MODEL_ARN = f"arn:aws:bedrock:{REGION}::foundation-model/amazon.rerank-v1:0"
QUESTION = "Who patented the typewriter in 1868?"
PASSAGES = [
    Passage(passage_id="docs:ibm.md#0", text="IBM sold its microcomputer division to Lenovo in 2005.", title="IBM"),
    Passage(
        passage_id="docs:wp.pdf#1",
        text="Patented in 1868 by Christopher Latham Sholes, the typewriter changed how people wrote.",
        title="Word processors",
    ),
]


def agent_runtime():
    return boto3.client("bedrock-agent-runtime", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def rerank_response(*scored: tuple[int, float]) -> dict:
    return {"results": [{"index": i, "relevanceScore": score} for i, score in scored]}


def test_the_reranker_scores_every_passage_in_one_call() -> None:
    client = agent_runtime()
    reranker = BedrockReranker(client, MODEL_ARN)
    texts = [p.text for p in PASSAGES]
    with Stubber(client) as stub:
        stub.add_response("rerank", rerank_response((1, 0.93), (0, 0.02)), rerank_request(QUESTION, texts, MODEL_ARN))
        assert reranker.rerank(QUESTION, texts) == [0.02, 0.93]
        stub.assert_no_pending_responses()
    request = rerank_request(QUESTION, texts, MODEL_ARN)
    assert request["queries"] == [{"type": "TEXT", "textQuery": {"text": QUESTION}}]
    assert request["rerankingConfiguration"]["bedrockRerankingConfiguration"]["numberOfResults"] == 2
    assert reranker.model_id == "amazon.rerank-v1:0" and reranker.rerank(QUESTION, []) == []


def test_a_failing_reranker_is_a_clear_error() -> None:
    client = agent_runtime()
    with Stubber(client) as stub:
        stub.add_client_error("rerank", service_error_code="ThrottlingException", http_status_code=429)
        with pytest.raises(RagError, match="reranker unavailable: ThrottlingException"):
            BedrockReranker(client, MODEL_ARN).rerank(QUESTION, ["a passage"])


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):
    return build_services(Settings(data_dir=tmp_path_factory.mktemp("rerank")))


def test_reranking_is_off_by_default(services) -> None:
    assert Settings(data_dir=Path("unused")).search.rerank is False
    assert services.synthesis_steps.reranker is None


def test_the_reranked_order_reaches_the_gate_and_the_answer(services) -> None:
    client = agent_runtime()
    steps = services.synthesis_steps.with_search_defaults(services.settings.search.defaults())
    steps.reranker = BedrockReranker(client, MODEL_ARN)
    # The reranker puts the typewriter passage, given second, first; the gate's coverage then reads it.
    request = SynthesisRequest(principal=Principal(tenant="t"), question=QUESTION, provided=PASSAGES)
    with Stubber(client) as stub:
        stub.add_response("rerank", rerank_response((1, 0.97), (0, 0.01)))
        evidence = steps.evidence(request)
        stub.assert_no_pending_responses()
    assert [p.title for p in evidence.passages] == ["Word processors", "IBM"]
    assert [p.relevance for p in evidence.passages] == [0.97, 0.01]
    decision = steps.decide(evidence)
    assert decision.answerable, decision
    answer = steps.cite(evidence, decision, steps.draft(evidence, "short", []))
    assert answer.citations[0].passage.title == "Word processors" and "Sholes" in answer.text
    with Stubber(client) as stub:
        stub.add_response("rerank", rerank_response((0, 0.99), (1, 0.0)))
        flipped = steps.evidence(request)
    assert [p.title for p in flipped.passages] == ["IBM", "Word processors"]
    assert not steps.decide(flipped).answerable, "the gate reads the passage the reranker puts first"


def test_the_aws_deployment_builds_the_reranker_for_its_region() -> None:
    session = boto3.session.Session(region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    reranker = _aws_reranker(Settings(rerank=True, data_dir=Path("unused")), session, Config())
    assert reranker.model_arn == "arn:aws:bedrock:eu-west-1::foundation-model/amazon.rerank-v1:0"
