"""What a first `sam deploy` and its first traffic depend on, read from template.yaml and the state
machine without an AWS account: the time budget inside the HTTP API's 30 s, the stage's cost and
retention guards, logs that expire, bounded triggers, alarms, least-privilege roles, the optional
JWT authorizer, and checkov over the template SAM translates (each suppression justified).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode.cfn_yaml import loads

from ragmcp.adapters.aws.index_setup import ACCESS_DEADLINE_SECONDS, RESPONSE_TIMEOUT_SECONDS
from ragmcp.adapters.aws.stepfunctions import SYNC_TIMEOUTS
from ragmcp.bootstrap import BEDROCK_TIMEOUTS, EMBEDDING_TIMEOUTS, OPENSEARCH_TIMEOUT
from ragmcp.ingest.events import RENDITIONS_PREFIX
from ragmcp.security.oauth import JwtVerifier
from ragmcp.settings import Settings

from .aws_harness import REPO

TEMPLATE = REPO / "template.yaml"
STATE_MACHINE = REPO / "infra" / "statemachines" / "synthesis.asl.json"
AWS_TOOLS = REPO / ".tools" / "aws" / "bin"
CHECKOV = REPO / ".tools" / "checkov" / "bin" / "checkov"
HTTP_API_LIMIT_SECONDS = 30
FUNCTIONS = (
    "McpApiFunction",
    "ConsoleFunction",
    "IngestFunction",
    "SynthesisFunction",
    "JanitorFunction",
    "IndexSetupFunction",
)


def template() -> dict[str, Any]:
    return loads(TEMPLATE.read_text())


def resources() -> dict[str, Any]:
    return template()["Resources"]


def properties(name: str) -> dict[str, Any]:
    return resources()[name]["Properties"]


def timeout_of(name: str) -> int:
    return properties(name).get("Timeout", template()["Globals"]["Function"]["Timeout"])


def statements(function: str) -> list[dict[str, Any]]:
    """The function's inline statements, both branches of an Fn::If taken."""
    found = []
    for policy in properties(function).get("Policies", []):
        for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
            found += statement["Fn::If"][1:] if "Fn::If" in statement else [statement]
    return found


def actions(function: str) -> set[str]:
    found: set[str] = set()
    for statement in statements(function):
        action = statement["Action"]
        found |= {action} if isinstance(action, str) else set(action)
    return found


def policy_templates(function: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for policy in properties(function).get("Policies", []):
        for name, value in policy.items():
            if name != "Statement":
                found.setdefault(name, []).append(value)
    return found


# ---- R3: the time budget ----


def test_synthesis_finishes_inside_the_http_api_limit() -> None:
    machine = json.loads(STATE_MACHINE.read_text())
    mcp = timeout_of("McpApiFunction")
    assert mcp < HTTP_API_LIMIT_SECONDS, "the MCP function must end before API Gateway answers 503"
    connect, read = SYNC_TIMEOUTS
    assert machine["TimeoutSeconds"] < read, "the client must wait for the whole execution"
    assert connect + read < mcp, "StartSyncExecution must return (or time out) before the function does"
    task_timeouts = [s["TimeoutSeconds"] for s in machine["States"].values() if s["Type"] == "Task"]
    assert task_timeouts and all(t <= machine["TimeoutSeconds"] for t in task_timeouts)
    synthesis = timeout_of("SynthesisFunction")
    assert all(synthesis <= t for t in task_timeouts), "a task must not give up on a function still running"
    embed_connect, embed_read, embed_attempts = EMBEDDING_TIMEOUTS
    search_path = (embed_connect + embed_read) * embed_attempts + OPENSEARCH_TIMEOUT
    assert search_path < mcp, "a search's query embedding and its OpenSearch request end before the function"
    assert search_path < synthesis, "the retrieve task's search ends before the task"
    bedrock_connect, bedrock_read, bedrock_attempts = BEDROCK_TIMEOUTS
    assert (bedrock_connect + bedrock_read) * bedrock_attempts < synthesis, "the model calls must fit in the task"


def test_the_index_setup_answers_inside_its_timeouts() -> None:
    """403s are retried while the data access policy propagates, and the answer still goes out before
    the function times out; CloudFormation stops waiting soon after (ServiceTimeout), not after an hour."""
    setup = timeout_of("IndexSetupFunction")
    requests = 3 * OPENSEARCH_TIMEOUT  # exists, create, the mapping check
    assert ACCESS_DEADLINE_SECONDS >= 120, "AWS documents up to about a minute for a data access policy"
    assert ACCESS_DEADLINE_SECONDS + requests + RESPONSE_TIMEOUT_SECONDS < setup
    service_timeout = properties("SearchIndex")["ServiceTimeout"]
    assert setup < service_timeout <= setup + 60


def test_retries_stay_inside_the_machine_timeout() -> None:
    machine = json.loads(STATE_MACHINE.read_text())
    for name, state in machine["States"].items():
        for retry in state.get("Retry", []):
            assert retry["MaxAttempts"] <= 1, f"{name} retries beyond the budget"


def test_the_fail_state_keeps_the_error_and_its_cause() -> None:
    machine = json.loads(STATE_MACHINE.read_text())
    fails = [s for s in machine["States"].values() if s["Type"] == "Fail"]
    assert fails
    for state in machine["States"].values():
        for catch in state.get("Catch", []):
            assert catch["ResultPath"] == "$.error"
    for fail in fails:
        assert fail.get("ErrorPath") == "$.error.Error" and fail.get("CausePath") == "$.error.Cause"
        assert "Error" not in fail and "Cause" not in fail


# ---- C1-C3: what a stage keeps and costs ----


def test_the_stage_decides_retention_lock_mode_and_size() -> None:
    t = template()
    assert t["Parameters"]["Stage"]["AllowedValues"] == ["dev", "prod"]
    assert t["Parameters"]["Stage"]["Default"] == "dev"
    stage = t["Mappings"]["Stage"]
    assert stage["dev"]["ObjectLockMode"] == "GOVERNANCE" and stage["prod"]["ObjectLockMode"] == "COMPLIANCE"
    assert stage["dev"]["DomainInstanceCount"] == 1 and stage["prod"]["DomainInstanceCount"] >= 2
    lock = properties("AuditArchiveBucket")["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
    assert lock["Mode"] == {"Fn::FindInMap": ["Stage", {"Ref": "Stage"}, "ObjectLockMode"]}
    cluster = properties("SearchDomain")["ClusterConfig"]
    assert cluster["InstanceType"] == {"Fn::FindInMap": ["Stage", {"Ref": "Stage"}, "DomainInstanceType"]}
    assert cluster["InstanceCount"] == {"Fn::FindInMap": ["Stage", {"Ref": "Stage"}, "DomainInstanceCount"]}
    by_stage = {"Fn::If": ["IsProd", "Retain", "Delete"]}
    durable = ["DropBucket", "SearchDomain", "UserPool", "VectorCollection"]
    durable += [n for n, r in resources().items() if "PointInTimeRecoverySpecification" in r.get("Properties", {})]
    assert len(durable) == 9
    for name in durable:
        assert resources()[name]["DeletionPolicy"] == by_stage, name
        assert resources()[name]["UpdateReplacePolicy"] == by_stage, name
    always_kept = [n for n, r in resources().items() if r.get("DeletionPolicy") == "Retain"]
    assert sorted(always_kept) == ["AuditArchiveBucket", "AuditKeySecret"], "only the audit trail outlives a dev stack"


def mentions(value: Any, needle: dict[str, Any]) -> bool:
    return needle == value or (
        isinstance(value, dict | list)
        and any(mentions(v, needle) for v in (value.values() if isinstance(value, dict) else value))
    )


def test_switching_the_stage_replaces_no_named_resource() -> None:
    """A property CloudFormation can only set at creation, on a resource with a name of ours, must not
    follow the Stage: dev -> prod would replace it, and a named resource cannot be replaced (the name
    is taken). The create-only properties are cfn-lint's copy of the resource schemas."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    names = {"Name", "DomainName", "BucketName", "LogGroupName", "TableName", "QueueName", "UserPoolName"}
    checked = 0
    for name, resource in resources().items():
        if resource["Type"].startswith("AWS::Serverless::"):
            continue
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource["Type"]).schema
        create_only = [p.removeprefix("/properties/") for p in schema.get("createOnlyProperties", [])]
        props = resource.get("Properties", {})
        if not names & set(create_only) & set(props):
            continue
        checked += 1
        for prop in create_only:
            assert not mentions(props.get(prop), {"Ref": "Stage"}), f"{name}.{prop} follows the Stage"
    assert checked >= 4


def test_serverless_policy_and_group_names_fit() -> None:
    """AOSS names are at most 32 characters: the collection's and the names made from it."""
    pattern = template()["Parameters"]["CollectionName"]["AllowedPattern"]
    longest = 1 + int(pattern.rsplit(",", 1)[1].split("}")[0])
    suffixes = [
        properties(n)["Name"]["Fn::Sub"].removeprefix("${CollectionName}")
        for n in (
            "VectorCollectionEncryption",
            "VectorCollectionNetwork",
            "VectorCollectionAccess",
            "VectorCollectionGroup",
        )
    ]
    assert max(longest + len(s) for s in suffixes) <= 32, (longest, suffixes)


def evaluate_rule(value: Any, parameters: dict[str, Any]) -> Any:
    """CloudFormation's rule functions (Fn::Equals, Not, And, Or, Contains; Ref) on given parameters."""
    if isinstance(value, list):
        return [evaluate_rule(v, parameters) for v in value]
    if not isinstance(value, dict):
        return value
    ((function, arg),) = value.items()
    if function == "Ref":
        return parameters[arg]
    args = evaluate_rule(arg, parameters)
    return {
        "Fn::Equals": lambda: args[0] == args[1],
        "Fn::Not": lambda: not args[0],
        "Fn::And": lambda: all(args),
        "Fn::Or": lambda: any(args),
        "Fn::Contains": lambda: args[1] in args[0],
    }[function]()


def failed_rules(**given: Any) -> list[str]:
    t = template()
    parameters = {n: p.get("Default", "") for n, p in t["Parameters"].items()}
    for n, p in t["Parameters"].items():
        if p["Type"] == "CommaDelimitedList":
            parameters[n] = parameters[n].split(",")
    parameters.update(given)
    failed = []
    for rule in t["Rules"].values():
        if "RuleCondition" in rule and not evaluate_rule(rule["RuleCondition"], parameters):
            continue
        failed += [a["AssertDescription"] for a in rule["Assertions"] if not evaluate_rule(a["Assert"], parameters)]
    return failed


def test_subnets_without_security_groups_are_refused_before_anything_is_made() -> None:
    """Lambda refuses a VpcConfig with subnets and an empty security group list (CreateFunction fails
    half-way through the stack): the rules refuse the parameters first."""
    assert failed_rules() == []
    assert failed_rules(FunctionSubnetIds=["subnet-1"], FunctionSecurityGroupIds=["sg-1"]) == []
    assert failed_rules(FunctionSubnetIds=["subnet-1"], FunctionSecurityGroupIds=[""])


def test_serverless_capacity_is_capped() -> None:
    group = properties("VectorCollectionGroup")
    limits = group["CapacityLimits"]
    assert set(limits) == {"MaxIndexingCapacityInOcu", "MaxSearchCapacityInOcu"}
    stage = template()["Mappings"]["Stage"]
    assert stage["dev"]["MaxIndexingOcu"] == 2
    assert template()["Parameters"]["CollectionStandbyReplicas"]["Default"] == "DISABLED"
    assert properties("VectorCollection")["CollectionGroupName"] == {"Ref": "VectorCollectionGroup"}


def test_every_log_group_expires() -> None:
    groups = {n: r for n, r in resources().items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert all("RetentionInDays" in g["Properties"] for g in groups.values())
    for function in FUNCTIONS:
        logging = properties(function)["LoggingConfig"]
        assert logging["LogGroup"]["Ref"] in groups, function
    api = properties("McpHttpApi")["AccessLogSettings"]
    assert api["DestinationArn"] == {"Fn::GetAtt": ["McpApiAccessLogs", "Arn"]}
    for field in ("$context.requestId", "$context.status", "$context.identity.sourceIp", "$context.routeKey"):
        assert field in api["Format"]
    oauth = properties("McpOAuthStage")["AccessLogSettings"]
    assert oauth["DestinationArn"] == api["DestinationArn"]


# ---- C4: bounded triggers, dead letters that someone hears about ----


def test_the_ingest_trigger_has_a_concurrency_ceiling() -> None:
    event = properties("IngestFunction")["Events"]["DropBucketChanges"]["Properties"]
    assert event["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "IngestMaxConcurrency"}
    assert template()["Parameters"]["IngestMaxConcurrency"]["MaxValue"] <= 100


def test_dead_letters_raise_an_alarm() -> None:
    alarms = [r["Properties"] for r in resources().values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    on_dlq = [
        a
        for a in alarms
        if a["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["IngestDeadLetterQueue", "QueueName"]}}]
    ]
    assert len(on_dlq) == 1
    alarm = on_dlq[0]
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible" and alarm["Threshold"] == 1
    assert alarm["AlarmActions"] == [{"Ref": "OperationsTopic"}]


class SnsDouble:
    """Whether a service may publish to an encrypted SNS topic, as SNS and KMS decide it: SNS encrypts
    with the topic's key on the publisher's behalf, so the publisher needs kms:GenerateDataKey* and
    kms:Decrypt on it. An AWS-managed key (alias/aws/sns) has a policy no one can change that allows
    only principals of the account: CloudWatch alarms are refused, and dropped without an error."""

    def __init__(self, template: dict[str, Any]):
        self.resources = template["Resources"]

    def may_publish(self, topic: str, service: str) -> bool:
        key = self.resources[topic]["Properties"].get("KmsMasterKeyId")
        if key is None:
            return True
        if not (isinstance(key, dict) and "Ref" in key):
            return False  # alias/aws/sns or another key this stack does not control
        policy = self.resources[key["Ref"]]["Properties"]["KeyPolicy"]
        needed = {"kms:Decrypt", "kms:GenerateDataKey*"}
        for statement in policy["Statement"]:
            principal = statement.get("Principal", {}).get("Service")
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if statement["Effect"] == "Allow" and principal == service:
                needed -= set(actions)
        return not needed


def test_cloudwatch_may_publish_the_alarms_to_the_operations_topic() -> None:
    sns = SnsDouble(template())
    alarms = [r["Properties"] for r in resources().values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert alarms
    for alarm in alarms:
        for action in alarm["AlarmActions"]:
            assert sns.may_publish(action["Ref"], "cloudwatch.amazonaws.com"), action
    assert not SnsDouble({"Resources": {"T": {"Properties": {"KmsMasterKeyId": "alias/aws/sns"}}}}).may_publish(
        "T", "cloudwatch.amazonaws.com"
    )


def test_the_stream_trigger_bisects_retries_a_few_times_and_parks_failures() -> None:
    stream = properties("JanitorFunction")["Events"]["TtlRemovals"]["Properties"]
    assert stream["BisectBatchOnFunctionError"] is True
    assert 0 <= stream["MaximumRetryAttempts"] <= 5
    assert stream["MaximumRecordAgeInSeconds"] <= 6 * 3600
    assert stream["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["JanitorFailures", "Arn"]}


# ---- S4, R7: least privilege; the index made once, at deploy time ----


def test_runtime_roles_cannot_create_or_drop_the_index() -> None:
    for function in ("McpApiFunction", "IngestFunction", "SynthesisFunction", "JanitorFunction"):
        granted = actions(function)
        assert not granted & {"es:ESHttpPut", "es:ESHttpDelete", "es:ESHttp*"}, function
    assert not {a for a in actions("JanitorFunction") if a.startswith(("es:", "aoss:"))}
    assert "es:ESHttpPut" in actions("IndexSetupFunction")
    access = properties("VectorCollectionAccess")["Policy"]["Fn::Sub"]
    rules = json.loads(access[0])
    creators = [r["Principal"] for r in rules if any("aoss:CreateIndex" in x["Permission"] for x in r["Rules"])]
    assert creators == [["${Setup}"]]
    assert properties("SearchIndex")["ServiceToken"] == {"Fn::GetAtt": ["IndexSetupFunction", "Arn"]}


def test_the_mcp_role_reads_keys_by_hash_and_cannot_rewrite_the_audit_trail() -> None:
    templates = policy_templates("McpApiFunction")
    assert "S3CrudPolicy" not in templates
    tables = {v["TableName"]["Ref"] for name, vs in templates.items() if name.startswith("DynamoDB") for v in vs}
    assert "KeysTable" not in tables and "AuditTable" not in tables
    by_sid = {s["Sid"]: s for s in statements("McpApiFunction")}
    assert by_sid["KeyByHash"]["Action"] == "dynamodb:GetItem"
    assert not {"dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:BatchWriteItem"} & set(
        by_sid["AuditAppendOnly"]["Action"]
    )
    s3 = {a for a in actions("McpApiFunction") if a.startswith("s3:")}
    assert s3 <= {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"}


def test_the_console_routes_go_to_the_console_function_and_its_role() -> None:
    """The console's pages scan and write the keys table and read the audit archive: they run as the
    console function (the MCP function's code, its own role); the MCP role keeps GetItem by hash."""

    def paths(function: str) -> set[str]:
        return {e["Properties"]["Path"] for e in properties(function).get("Events", {}).values()}

    assert paths("ConsoleFunction") == {"/console", "/console/{proxy+}"}
    assert not {p for p in paths("McpApiFunction") if p.startswith("/console")}
    assert properties("ConsoleFunction")["CodeUri"] == properties("McpApiFunction")["CodeUri"]
    tables = {v["TableName"]["Ref"] for v in policy_templates("ConsoleFunction")["DynamoDBCrudPolicy"]}
    assert "KeysTable" in tables and "AuditTable" not in tables
    assert "s3:ListBucket" in actions("ConsoleFunction") and "ConsoleFunctionRole" in json.dumps(
        properties("VectorCollectionAccess")
    )


def test_the_serverless_collection_is_not_public_by_default() -> None:
    t = template()
    assert t["Parameters"]["CollectionPublicAccess"]["Default"] == "false"
    policy = properties("VectorCollectionNetwork")["Policy"]["Fn::If"]
    assert policy[0] == "PublicCollection"
    private = policy[2]["Fn::Sub"]
    assert '"AllowFromPublic":false' in private and "SourceVPCEs" in private
    rule = t["Rules"]["PrivateCollectionNeedsItsNetwork"]
    asserted = json.dumps(rule["Assertions"])
    assert "CollectionVpcEndpointId" in asserted and "FunctionSubnetIds" in asserted
    assert t["Globals"]["Function"]["VpcConfig"]["Fn::If"][0] == "InVpc"
    assert resources()["FunctionNetworkInterfaces"]["Condition"] == "InVpc"


def test_the_ingest_role_writes_only_renditions() -> None:
    assert policy_templates("IngestFunction")["S3ReadPolicy"] == [{"BucketName": {"Ref": "DropBucket"}}]
    assert "S3CrudPolicy" not in policy_templates("IngestFunction")
    (renditions,) = [s for s in statements("IngestFunction") if "s3:" in json.dumps(s["Action"])]
    assert renditions["Effect"] == "Allow"
    assert sorted(renditions["Action"]) == ["s3:DeleteObject", "s3:PutObject"]
    assert renditions["Resource"] == {"Fn::Sub": "${DropBucket.Arn}/" + RENDITIONS_PREFIX + "*"}
    # The renditions it writes are not change events: no trigger covers their prefix.
    triggers = properties("DropBucket")["NotificationConfiguration"]["QueueConfigurations"]
    assert not [c for c in triggers if RENDITIONS_PREFIX.startswith(c["Filter"]["S3Key"]["Rules"][0]["Value"])]


# ---- issue 14's template part: Cognito and the JWT authorizer ----


def test_the_jwt_authorizer_checks_tokens_before_the_function() -> None:
    t = template()
    assert t["Parameters"]["Authentication"]["Default"] == "keys"
    assert resources()["UserPool"]["Condition"] == "UseCognito"
    assert properties("UserPool")["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    authorizer = properties("McpOAuthAuthorizer")
    assert authorizer["AuthorizerType"] == "JWT"
    issuer = authorizer["JwtConfiguration"]["Issuer"]["Fn::If"]
    assert issuer[0] == "UseCognito" and issuer[2] == {"Ref": "JwtIssuer"}
    assert "${UserPool}" in issuer[1]["Fn::Sub"]
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in resources().values()
        if r["Type"] == "AWS::ApiGatewayV2::Route"
    }
    for key in ("ANY /mcp", "ANY /mcp/{profile}"):
        assert routes[key]["AuthorizationType"] == "JWT"
        assert routes[key]["AuthorizerId"] == {"Ref": "McpOAuthAuthorizer"}
    assert routes["GET /healthz"]["AuthorizationType"] == "NONE"
    env = t["Globals"]["Function"]["Environment"]["Variables"]
    assert env["RAGMCP_OAUTH_ISSUER"]["Fn::If"][1] == issuer[1], "the function checks the same issuer again"


def test_oauth_discovery_is_reachable_without_a_token_and_names_the_api(monkeypatch) -> None:
    """An agent reads /.well-known/oauth-protected-resource before it has a token: the route skips the
    authorizer, and the function knows its public URL (the metadata's resource, the challenge's link)."""
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in resources().values()
        if r["Type"] == "AWS::ApiGatewayV2::Route"
    }
    for key in ("GET /.well-known/oauth-protected-resource", "GET /.well-known/oauth-protected-resource/{proxy+}"):
        assert routes[key]["AuthorizationType"] == "NONE", key
        assert routes[key]["Target"] == {"Fn::Sub": "integrations/${McpOAuthIntegration}"}
    public = properties("McpApiFunction")["Environment"]["Variables"]["RAGMCP_PUBLIC_URL"]["Fn::If"]
    assert public[0] == "UseJwt" and "${McpOAuthApi}.execute-api" in public[1]["Fn::Sub"]
    monkeypatch.setenv("RAGMCP_PUBLIC_URL", "https://abc.execute-api.eu-west-1.amazonaws.com")
    assert Settings().resource_url.startswith("https://abc.execute-api.eu-west-1.amazonaws.com/")


def cognito_env() -> dict[str, str]:
    """The function environment Authentication=cognito gives: each Fn::If's Cognito branch."""
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    found = {}
    for name in ("RAGMCP_OAUTH_DEFAULT_TENANT", "RAGMCP_OAUTH_SCOPE_PREFIX", "RAGMCP_OAUTH_CLAIMS_GROUPS"):
        condition, cognito, other = env[name]["Fn::If"]
        assert condition == "UseCognito" and other == {"Ref": "AWS::NoValue"}, name
        found[name] = cognito
    return found


def test_cognito_tokens_carry_the_scopes_the_function_maps() -> None:
    server = properties("UserPoolResourceServer")
    assert resources()["UserPoolResourceServer"]["Condition"] == "UseCognito"
    assert server["UserPoolId"] == {"Ref": "UserPool"}
    env = cognito_env()
    assert env["RAGMCP_OAUTH_SCOPE_PREFIX"] == server["Identifier"] + "/"
    assert env["RAGMCP_OAUTH_CLAIMS_GROUPS"] == "cognito:groups"
    assert env["RAGMCP_OAUTH_DEFAULT_TENANT"] == {"Ref": "CognitoTenant"}
    assert template()["Parameters"]["CognitoTenant"]["Default"]
    settings = Settings(
        oauth_issuer="https://cognito-idp.eu-west-1.amazonaws.com/pool",
        oauth_scope_prefix=env["RAGMCP_OAUTH_SCOPE_PREFIX"],
        oauth_claims_groups=env["RAGMCP_OAUTH_CLAIMS_GROUPS"],
        oauth_default_tenant=template()["Parameters"]["CognitoTenant"]["Default"],
    )
    expected = JwtVerifier.from_settings(settings).scopes_supported
    assert tuple(f"{server['Identifier']}/{s['ScopeName']}" for s in server["Scopes"]) == expected
    client = resources()["UserPoolClient"]
    assert client["DependsOn"] == "UserPoolResourceServer"
    assert tuple(client["Properties"]["AllowedOAuthScopes"]) == expected
    assert client["Properties"]["AllowedOAuthFlows"] == ["code"]
    assert client["Properties"]["AllowedOAuthFlowsUserPoolClient"] is True
    assert client["Properties"]["GenerateSecret"] is False
    assert resources()["UserPoolDomain"]["Condition"] == "UseCognito"
    assert properties("UserPoolDomain")["UserPoolId"] == {"Ref": "UserPool"}


# ---- the deploy guide (localstack/README.md) against the template ----


def test_the_deploy_guide_names_what_the_template_has() -> None:
    """Every stack output the guide reads (`$(out X)`), every parameter of its table, every resource
    it names and the `ragmcp` commands it runs exist; the network list names what the functions
    call from a VPC."""
    import re
    import shlex

    from ragmcp.cli import parser

    guide = (REPO / "localstack" / "README.md").read_text()
    t = template()
    outputs = set(re.findall(r"\$\(out (\w+)\)", guide))
    assert outputs and outputs <= set(t["Outputs"]), outputs - set(t["Outputs"])
    parameters = set(re.findall(r"^\| `(\w+)` \|", guide, re.M))
    assert parameters and parameters <= set(t["Parameters"]), parameters - set(t["Parameters"])
    for resource in ("IngestFunction", "McpApiAccessLogs", "IngestDeadLettersAlarm", "ConsoleFunction"):
        assert f"{resource}" in guide and resource in t["Resources"], resource
    commands = re.findall(r"\.venv/bin/ragmcp ([^`\n]+)", guide)
    assert len(commands) >= 2
    for command in commands:
        parser().parse_args(shlex.split(command))  # exits (fails the test) on an unknown command or option
    for needed in ("sync-states", "X-Ray", "jwks", "ServiceTimeout", "FunctionSecurityGroupIds"):
        assert needed in guide, needed
    assert "USER_PASSWORD_AUTH" not in guide and "IdToken" not in guide, "scopes come in the access token"


# ---- checkov over what CloudFormation deploys ----


def suppression(function: str, check: str) -> str:
    skips = resources()[function]["Metadata"]["checkov"]["skip"]
    return next(s["comment"] for s in skips if s["id"] == check)


def test_the_suppression_reasons_say_what_the_template_does() -> None:
    """CKV_AWS_117 (VPC) and CKV_AWS_116 (DLQ): the reasons must match how each function runs."""
    assert template()["Globals"]["Function"]["VpcConfig"]["Fn::If"][0] == "InVpc"
    for function in FUNCTIONS:
        assert "FunctionSubnetIds" in suppression(function, "CKV_AWS_117"), function
    asynchronous = {"IndexSetupFunction"} | {
        f for f in FUNCTIONS if any(e["Type"] == "Schedule" for e in properties(f).get("Events", {}).values())
    }
    assert asynchronous == {"IndexSetupFunction", "JanitorFunction"}
    for function in FUNCTIONS:
        reason = suppression(function, "CKV_AWS_116")
        if function in asynchronous:
            assert "asynchronously" in reason and "Invoked synchronously" not in reason, function


def test_checkov_passes_with_every_suppression_justified(tmp_path: Path) -> None:
    python = AWS_TOOLS / "python"
    if not python.is_file() or not CHECKOV.is_file():
        pytest.skip("make aws-tools installs aws-sam-cli (.tools/aws) and checkov (.tools/checkov)")
    translated = tmp_path / "translated.json"
    subprocess.run(
        [str(python), str(REPO / "infra" / "tools" / "sam_translate.py"), str(TEMPLATE), str(translated)],
        check=True,
        timeout=300,
        cwd=REPO,
    )
    result = subprocess.run(
        [
            str(CHECKOV),
            "-f",
            str(translated),
            "--framework",
            "cloudformation",
            "--quiet",
            "--skip-download",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(result.stdout)
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == [], failed
    for name, resource in resources().items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert len(skip.get("comment", "")) >= 40, f"{name}: {skip['id']} needs a reason"
