"""Every AWS call a function makes, allowed by that function's own role as the template defines it.

The template is translated with SAM (infra/tools/sam_translate.py, the same translation the checkov
and cfn-lint tests read), each role's inline policies are resolved against the emulator's resources
(Ref, Fn::GetAtt, Fn::Sub, Fn::If with the template's conditions at their defaults), and two checks
run on every call:

- moto enforces IAM (`INITIAL_NO_AUTH_ACTION_COUNT` 0 while the handlers run): each function signs
  with credentials of an IAM role created in moto from its resolved policies and assumed through STS,
  so an action the role lacks is refused as AWS would refuse it. moto matches most services' actions
  against the resource `*` only (S3 and SQS against the real ARN), so the policies it is given have
  their resources widened to `*` outside S3 and SQS;
- a botocore hook (`before-call`, on every client made while the tier runs) names each call's IAM
  action(s) and resource ARN(s) and evaluates them against the role's statements with their real
  resources, so a statement on the wrong table or bucket prefix fails too. A call the hook cannot
  name is a finding as well: nothing goes unchecked silently.

Findings are collected in `IamLedger.findings`; the tier's tests assert there are none.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .aws_harness import ACCOUNT, REGION, REPO

ARN_PREFIX = "arn:aws"
# The template's logical roles, by the function (module under functions/) that runs with each.
ROLES = {
    "mcp_api": "McpApiFunctionRole",
    "console": "ConsoleFunctionRole",
    "ingest": "IngestFunctionRole",
    "synthesis": "SynthesisFunctionRole",
    "janitor": "JanitorFunctionRole",
    "index_setup": "IndexSetupFunctionRole",
    "state_machine": "SynthesisStateMachineRole",
}
TABLES = {
    "DocumentsTable": "documents",
    "JobsTable": "jobs",
    "CatalogTable": "catalog",
    "KeysTable": "keys",
    "UploadsTable": "uploads",
    "ConversationsTable": "conversations",
    "RateLimitsTable": "rate-limits",
    "AuditTable": "audit",
    "EmbeddingCacheTable": "embedding-cache",
    "IdempotencyTable": "idempotency",
}


def emulator_resources(secret_arn: str, state_machine_arn: str) -> dict[str, dict[str, str]]:
    """What Ref and Fn::GetAtt give for the template's resources, as the emulator provisioned them
    (localstack/init/ready.d/provision.py names them after ragmcp's settings defaults)."""
    found: dict[str, dict[str, str]] = {}
    for logical, suffix in TABLES.items():
        arn = f"{ARN_PREFIX}:dynamodb:{REGION}:{ACCOUNT}:table/ragmcp-{suffix}"
        found[logical] = {"Ref": f"ragmcp-{suffix}", "Arn": arn, "StreamArn": f"{arn}/stream/*"}
    for logical, name in {"DropBucket": "ragmcp-drop", "AuditArchiveBucket": "ragmcp-audit-archive"}.items():
        found[logical] = {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}
    for logical, name in {
        "IngestQueue": "ragmcp-ingest",
        "IngestDeadLetterQueue": "ragmcp-ingest-dlq",
        "JanitorFailures": "ragmcp-janitor-failures",
    }.items():
        found[logical] = {
            "Ref": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}",
            "Arn": f"{ARN_PREFIX}:sqs:{REGION}:{ACCOUNT}:{name}",
            "QueueName": name,
        }
    found["AuditKeySecret"] = {"Ref": secret_arn}
    found["SynthesisStateMachine"] = {"Ref": state_machine_arn, "Name": state_machine_arn.rsplit(":", 1)[1]}
    found["McpApiFunction"] = {
        "Ref": "ragmcp-mcp",
        "Arn": f"{ARN_PREFIX}:lambda:{REGION}:{ACCOUNT}:function:ragmcp-mcp",
    }
    found["SynthesisFunction"] = {
        "Ref": "ragmcp-synthesis",
        "Arn": f"{ARN_PREFIX}:lambda:{REGION}:{ACCOUNT}:function:ragmcp-synthesis",
    }
    for role in ROLES.values():
        found[role] = {"Ref": role, "Arn": f"arn:aws:iam::{ACCOUNT}:role/{role}"}
    found["SearchDomain"] = {"Ref": "ragmcp", "Arn": f"{ARN_PREFIX}:es:{REGION}:{ACCOUNT}:domain/ragmcp"}
    found["VectorCollection"] = {"Ref": "c0", "Arn": f"{ARN_PREFIX}:aoss:{REGION}:{ACCOUNT}:collection/c0"}
    return found


# ---- resolving the translated template ----


class Resolver:
    def __init__(self, template: dict[str, Any], resources: dict[str, dict[str, str]]):
        self.template = template
        self.resources = resources
        self.parameters = {name: spec.get("Default", "") for name, spec in template.get("Parameters", {}).items()}
        self.pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": "ragmcp",
        }

    def condition(self, name: str) -> bool:
        return bool(self.value(self.template["Conditions"][name]))

    def ref(self, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            value = self.parameters[name]
            kind = self.template["Parameters"][name]["Type"]
            return [v for v in str(value).split(",")] if kind == "CommaDelimitedList" else value
        if name in self.resources:
            return self.resources[name]["Ref"]
        return f"arn:aws:unresolved:::{name}"

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                return NO_VALUE if arg == "AWS::NoValue" else self.ref(arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.resources.get(logical, {}).get(attribute, f"arn:aws:unresolved:::{logical}.{attribute}")
            if key == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], self.value(arg[1]))
                return self.sub(text, names)
            if key == "Fn::If":
                condition, yes, no = arg
                return self.value(yes if self.condition(condition) else no)
            if key == "Fn::Join":
                return arg[0].join(str(v) for v in self.value(arg[1]))
            if key == "Fn::Equals":
                first, second = self.value(arg)
                return first == second
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Fn::And":
                return all(self.value(arg))
            if key == "Fn::Or":
                return any(self.value(arg))
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::Select":
                return self.value(arg[1])[int(self.value(arg[0]))]
            if key == "Fn::Split":
                return str(self.value(arg[1])).split(arg[0])
            if key == "Fn::Contains":
                return self.value(arg[1]) in self.value(arg[0])
        return {k: v for k, v in ((k, self.value(v)) for k, v in node.items()) if v is not NO_VALUE}

    def sub(self, text: str, names: dict[str, Any]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in names:
                return str(names[name])
            if "." in name:
                return str(self.value({"Fn::GetAtt": name.split(".", 1)}))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}!]+)\}", one, text)


NO_VALUE = object()


@dataclass(frozen=True)
class Statement:
    actions: tuple[str, ...]
    resources: tuple[str, ...]

    def allows(self, action: str, resource: str) -> bool:
        return any(_glob(a, action, case=False) for a in self.actions) and any(
            _glob(r, resource, case=True) for r in self.resources
        )


def _glob(pattern: str, value: str, *, case: bool) -> bool:
    regex = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
    return re.match(regex.replace(r"\?", "."), value, 0 if case else re.IGNORECASE) is not None


def role_statements(template: dict[str, Any], role: str, resolver: Resolver) -> list[Statement]:
    """The Allow statements of a role's inline policies, resolved (no Deny, NotAction or
    NotResource appears in the template; the test says so if one does)."""
    found = []
    for policy in resolver.value(template["Resources"][role]["Properties"].get("Policies", [])):
        for statement in policy["PolicyDocument"]["Statement"]:
            unsupported = {"NotAction", "NotResource", "Condition"} & set(statement)
            assert statement["Effect"] == "Allow" and not unsupported, (role, statement)
            actions = statement["Action"]
            resources = statement["Resource"]
            found.append(
                Statement(
                    tuple([actions] if isinstance(actions, str) else actions),
                    tuple([resources] if isinstance(resources, str) else resources),
                )
            )
    return found


def moto_policy(statements: list[Statement]) -> dict[str, Any]:
    """The policy moto enforces: moto matches the resource `*` for every service but S3 and SQS
    (whose real ARNs it matches), so the other services' resources are widened here and checked
    by the hook instead."""
    out = []
    for statement in statements:
        exact = [a for a in statement.actions if a.split(":")[0] in ("s3", "sqs")]
        wide = [a for a in statement.actions if a not in exact]
        if exact:
            out.append({"Effect": "Allow", "Action": exact, "Resource": list(statement.resources)})
        if wide:
            out.append({"Effect": "Allow", "Action": wide + moto_aliases(wide), "Resource": "*"})
    return {"Version": "2012-10-17", "Statement": out}


def moto_aliases(actions: list[str]) -> list[str]:
    """moto names some actions by their API operation where IAM does not: it asks for
    dynamodb:TransactWriteItems / TransactGetItems (AWS authorizes a transaction by its items' actions,
    PutItem, UpdateItem, DeleteItem, ConditionCheckItem, GetItem, which the hook checks on each item's
    table) and lambda:Invoke (IAM's lambda:InvokeFunction)."""
    lowered = {a.lower() for a in actions}
    aliases = []
    if lowered & {"dynamodb:putitem", "dynamodb:updateitem", "dynamodb:deleteitem", "dynamodb:conditioncheckitem"}:
        aliases.append("dynamodb:TransactWriteItems")
    if "dynamodb:getitem" in lowered:
        aliases.append("dynamodb:TransactGetItems")
    if "lambda:invokefunction" in lowered:
        aliases.append("lambda:Invoke")
    return aliases


# ---- naming each call's action and resource ----


def _table_arn(name: str) -> str:
    return name if name.startswith("arn:") else f"{ARN_PREFIX}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def _queue_arn(url: str) -> str:
    return f"{ARN_PREFIX}:sqs:{REGION}:{ACCOUNT}:{url.rstrip('/').rsplit('/', 1)[-1]}"


def _object(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


DYNAMO_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
S3_OBJECT_ACTIONS = {
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "GetObjectAttributes": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "ListParts": "s3:ListMultipartUploadParts",
    "GetObjectRetention": "s3:GetObjectRetention",
    "PutObjectRetention": "s3:PutObjectRetention",
    "GetObjectTagging": "s3:GetObjectTagging",
}
S3_VERSIONED = {
    "s3:GetObject": "s3:GetObjectVersion",
    "s3:DeleteObject": "s3:DeleteObjectVersion",
    "s3:GetObjectRetention": "s3:GetObjectVersion",
    "s3:PutObjectRetention": "s3:PutObjectRetention",
}
S3_BUCKET_ACTIONS = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "GetBucketVersioning": "s3:GetBucketVersioning",
    "GetObjectLockConfiguration": "s3:GetBucketObjectLockConfiguration",
}
LAMBDA_ACTIONS = {
    "Invoke": "lambda:InvokeFunction",
    "GetAlias": "lambda:GetAlias",
    "ListVersionsByFunction": "lambda:ListVersionsByFunction",
    "DeleteFunction": "lambda:DeleteFunction",
}
SQS_BATCHES = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def iam_requests(service: str, operation: str, params: dict[str, Any]) -> list[tuple[str, str]] | None:  # noqa: C901 - one branch per service and operation
    """The (action, resource ARN) pairs IAM authorizes for one API call; None: not known here."""
    if service == "dynamodb":
        if operation in ("BatchGetItem", "BatchWriteItem"):
            return [(f"dynamodb:{operation}", _table_arn(t)) for t in params["RequestItems"]]
        if operation in ("TransactWriteItems", "TransactGetItems"):
            found = []
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                found.append((f"dynamodb:{DYNAMO_ITEM_ACTIONS[kind]}", _table_arn(body["TableName"])))
            return found
        if "TableName" in params:
            arn = _table_arn(params["TableName"])
            if params.get("IndexName"):
                arn = f"{arn}/index/{params['IndexName']}"
            return [(f"dynamodb:{operation}", arn)]
        return None
    if service == "s3":
        bucket = params.get("Bucket", "")
        if operation in S3_OBJECT_ACTIONS:
            action = S3_OBJECT_ACTIONS[operation]
            if params.get("VersionId"):
                action = S3_VERSIONED.get(action, action)
            return [(action, _object(bucket, params["Key"]))]
        if operation == "DeleteObjects":
            objects = params["Delete"]["Objects"]
            return [
                ("s3:DeleteObjectVersion" if o.get("VersionId") else "s3:DeleteObject", _object(bucket, o["Key"]))
                for o in objects
            ]
        if operation in ("CopyObject", "UploadPartCopy"):
            source = params["CopySource"]
            if isinstance(source, dict):
                source_bucket, source_key, version = source["Bucket"], source["Key"], source.get("VersionId")
            else:
                path, _, query = unquote(source).lstrip("/").partition("?versionId=")
                (source_bucket, source_key), version = path.split("/", 1), query or None
            read = "s3:GetObjectVersion" if version else "s3:GetObject"
            return [("s3:PutObject", _object(bucket, params["Key"])), (read, _object(source_bucket, source_key))]
        if operation in S3_BUCKET_ACTIONS:
            return [(S3_BUCKET_ACTIONS[operation], f"arn:aws:s3:::{bucket}")]
        return None
    if service == "sqs":
        if operation == "GetQueueUrl":
            return [("sqs:GetQueueUrl", _queue_arn(params["QueueName"]))]
        return [(f"sqs:{SQS_BATCHES.get(operation, operation)}", _queue_arn(params["QueueUrl"]))]
    if service == "secretsmanager":
        return [(f"secretsmanager:{operation}", params["SecretId"])]
    if service == "sfn":
        if operation in ("StartExecution", "StartSyncExecution"):
            return [(f"states:{operation}", params["stateMachineArn"])]
        if operation in ("DescribeExecution", "StopExecution"):
            return [(f"states:{operation}", params["executionArn"])]
        return None
    if service == "lambda" and operation in LAMBDA_ACTIONS:
        name = params["FunctionName"]
        arn = name if name.startswith("arn:") else f"{ARN_PREFIX}:lambda:{REGION}:{ACCOUNT}:function:{name}"
        qualifier = params.get("Qualifier") or params.get("Name")
        return [(LAMBDA_ACTIONS[operation], f"{arn}:{qualifier}" if qualifier else arn)]
    if service == "sts" and operation == "GetCallerIdentity":
        return []  # no permission is needed
    return None


# ---- the ledger ----


@dataclass(frozen=True)
class Finding:
    function: str
    call: str
    action: str
    resource: str
    reason: str


@dataclass
class Identity:
    function: str
    role: str
    statements: list[Statement]
    credentials: dict[str, str]


@dataclass
class IamLedger:
    """Which credentials belong to which function, what each call needed, what was refused."""

    identities: dict[str, Identity] = field(default_factory=dict)
    operator_key: str = ""
    secret_arns: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    checked: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_key(self, access_key: str) -> Identity | None:
        return next((i for i in self.identities.values() if i.credentials["AWS_ACCESS_KEY_ID"] == access_key), None)

    def check(self, function: str, call: str, action: str, resource: str) -> None:
        identity = self.identities[function]
        resource = self.secret_arns.get(resource, resource)
        with self.lock:
            self.checked.append((function, action, resource))
            if not any(s.allows(action, resource) for s in identity.statements):
                self.findings.append(Finding(function, call, action, resource, f"not allowed by {identity.role}"))

    def before_call(self, model: Any, context: dict[str, Any], request_signer: Any, **_: Any) -> None:
        access_key = request_signer._credentials.get_frozen_credentials().access_key
        if access_key == self.operator_key:
            return
        service = model.service_model.service_name
        call = f"{service}:{model.name}"
        identity = self.by_key(access_key)
        if identity is None:
            with self.lock:
                self.findings.append(Finding("?", call, "", "", f"signed with unknown credentials {access_key}"))
            return
        context["iam_tier_function"] = identity.function
        needed = iam_requests(service, model.name, context.get("iam_tier_params", {}))
        if needed is None:
            with self.lock:
                unnamed = Finding(identity.function, call, "", "", "the tier cannot name this call's action")
                self.findings.append(unnamed)
            return
        for action, resource in needed:
            self.check(identity.function, call, action, resource)

    def after_call(
        self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        code = parsed.get("Error", {}).get("Code", "")
        # moto answers a refusal with its XML error even to JSON services: botocore then reads only the 403.
        if http_response.status_code == 403 or "AccessDenied" in code or code == "InvalidClientTokenId":
            with self.lock:
                self.findings.append(
                    Finding(
                        context.get("iam_tier_function", "?"),
                        f"{model.service_model.service_name}:{model.name}",
                        "",
                        "",
                        f"moto refused: {code}: {parsed['Error'].get('Message', '')}",
                    )
                )

    @contextmanager
    def acting_as(self, function: str) -> Iterator[None]:
        """The process environment's credentials are the function's while its handler runs (the
        clients it builds then sign with them, as they would in its Lambda)."""
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
        os.environ.update(self.identities[function].credentials)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def as_function(self, function: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def run(event: Any, context: Any) -> Any:
            with self.acting_as(function):
                return handler(event, context)

        return run

    def report(self) -> str:
        return "\n".join(f"{f.function}: {f.call} {f.action} {f.resource}: {f.reason}" for f in self.findings)


def stash_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context["iam_tier_params"] = dict(params)


def install_hooks(ledger: IamLedger, monkeypatch: Any) -> None:
    """Every botocore client made from now on reports its calls to the ledger."""
    import botocore.session

    original = botocore.session.Session.create_client

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        client.meta.events.register("before-parameter-build", stash_params)
        client.meta.events.register("before-call", ledger.before_call)
        client.meta.events.register("after-call", ledger.after_call)
        return client

    monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


def create_identities(ledger: IamLedger, session: Any, template: dict[str, Any], resolver: Resolver) -> None:
    """An operator user (the harness, the CLI) and one assumed role per function, in moto's IAM."""
    iam, sts = session.client("iam"), session.client("sts")
    iam.create_user(UserName="operator")
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="operator", PolicyName="all", PolicyDocument=json.dumps(everything))
    key = iam.create_access_key(UserName="operator")["AccessKey"]
    ledger.operator_key = key["AccessKeyId"]
    ledger.identities["operator"] = Identity(
        "operator",
        "operator",
        [Statement(("*",), ("*",))],
        {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]},
    )
    anyone = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
    }
    for function, role in ROLES.items():
        statements = role_statements(template, role, resolver)
        arn = iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(anyone))["Role"]["Arn"]
        iam.put_role_policy(RoleName=role, PolicyName="template", PolicyDocument=json.dumps(moto_policy(statements)))
        credentials = sts.assume_role(RoleArn=arn, RoleSessionName=function)["Credentials"]
        ledger.identities[function] = Identity(
            function,
            role,
            statements,
            {
                "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
                "AWS_SESSION_TOKEN": credentials["SessionToken"],
            },
        )


def operator_session(ledger: IamLedger) -> Any:
    import boto3

    creds = ledger.identities["operator"].credentials
    return boto3.session.Session(
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION,
    )


def route_state_machine_lambda_calls(ledger: IamLedger, monkeypatch: Any, endpoint: str) -> None:
    """moto's Step Functions engine invokes Lambda with fixed keys; here it signs as the state
    machine's role, so its LambdaInvokePolicy is checked too."""
    import boto3
    from botocore.config import Config
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    creds = ledger.identities["state_machine"].credentials

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        return boto3.client(
            service,
            region_name=region,
            endpoint_url=endpoint,
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=creds["AWS_SESSION_TOKEN"],
            config=Config(retries={"max_attempts": 0, "total_max_attempts": 1}),
        )

    monkeypatch.setattr(lambda_eval_utils, "boto_client_for", boto_client_for)


@contextmanager
def iam_enforced() -> Iterator[None]:
    """moto checks every request's signature and its signer's policies (it runs in this process)."""
    from moto.core.authorization import enable_iam_authentication

    with enable_iam_authentication():
        yield


def verify_bodiless_signatures_over_an_empty_body(monkeypatch: Any) -> None:
    """moto checks a SigV4 signature over `body or data`, and for a REST GET or DELETE (Lambda's
    GetAlias, ListVersionsByFunction, DeleteFunction) `data` holds the parsed parameters, so a correct
    signature fails; such a request has no body, and AWS hashes it as empty."""
    from moto.iam.access_control import IAMRequestBase

    original = IAMRequestBase._create_aws_request

    def create(self: Any) -> Any:
        if self._method in ("GET", "DELETE", "HEAD") and not self._body:
            self._data = b""
        return original(self)

    monkeypatch.setattr(IAMRequestBase, "_create_aws_request", create)


def prepare(translated: dict[str, Any], session: Any, endpoint: str, machine_arn: str, monkeypatch: Any) -> IamLedger:
    """The roles made in moto, the hooks installed, Step Functions' Lambda calls signed as its role."""
    secret_arn = session.client("secretsmanager").describe_secret(SecretId="ragmcp-audit-key")["ARN"]
    resolver = Resolver(translated, emulator_resources(secret_arn, machine_arn))
    ledger = IamLedger(secret_arns={"ragmcp-audit-key": secret_arn})
    create_identities(ledger, session, translated, resolver)
    install_hooks(ledger, monkeypatch)
    route_state_machine_lambda_calls(ledger, monkeypatch, endpoint)
    verify_bodiless_signatures_over_an_empty_body(monkeypatch)
    return ledger


def translate_template(template: Path, out: Path) -> dict[str, Any]:
    """template.yaml as SAM translates it (the tools `make aws-tools` installs; skipped without them)."""
    import subprocess

    import pytest

    python = REPO / ".tools" / "aws" / "bin" / "python"
    if not python.is_file():
        pytest.skip("aws-sam-cli's virtualenv .tools/aws is not installed (make aws-tools makes it)")
    subprocess.run(
        [str(python), str(REPO / "infra" / "tools" / "sam_translate.py"), str(template), str(out)],
        check=True,
        timeout=300,
        cwd=template.parent,
        capture_output=True,
    )
    return json.loads(out.read_text())


def published_function(session: Any, name: str, versions: int) -> None:
    """A function with `versions` published versions and the `live` alias on the last (as SAM's
    AutoPublishAlias leaves one after that many deploys)."""
    import io
    import zipfile

    iam = session.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    lam = session.client("lambda")
    for n in range(1, versions + 1):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("app.py", f"def handler(event, context):\n    return {n}\n")
        if n == 1:
            lam.create_function(
                FunctionName=name,
                Runtime="python3.12",
                Role=role,
                Handler="app.handler",
                Code={"ZipFile": buffer.getvalue()},
            )
        else:
            lam.update_function_code(FunctionName=name, ZipFile=buffer.getvalue())
        version = lam.publish_version(FunctionName=name)["Version"]
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion=version)


# ---- the search index's requests (OpenSearch is reached over HTTP, not botocore) ----

# What each client call of the adapter sends: the HTTP method and path (an OpenSearch Service domain
# authorizes es:ESHttp<Method> on <domain ARN>/<path>) and the permission an OpenSearch Serverless
# data access policy must grant on the index.
OPENSEARCH_REQUESTS = {
    "indices.exists": ("HEAD", "", "aoss:DescribeIndex"),
    "indices.create": ("PUT", "", "aoss:CreateIndex"),
    "indices.get_mapping": ("GET", "/_mapping", "aoss:DescribeIndex"),
    "indices.refresh": ("POST", "/_refresh", "aoss:WriteDocument"),
    "bulk": ("POST", "/_bulk", "aoss:WriteDocument"),
    "search": ("POST", "/_search", "aoss:ReadDocument"),
    "msearch": ("POST", "/_msearch", "aoss:ReadDocument"),
    "count": ("POST", "/_count", "aoss:ReadDocument"),
}


def data_access_rules(template: dict[str, Any], resources: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """The collection's data access policy as SearchService=serverless resolves it."""
    resolver = Resolver(template, resources)
    resolver.parameters["SearchService"] = "serverless"
    return json.loads(resolver.value(template["Resources"]["VectorCollectionAccess"]["Properties"]["Policy"]))


class CheckedOpenSearch:
    """An OpenSearch client (the double) as one function's role uses it: every request is checked
    against the role's es: statements (domain) and the collection's data access policy (Serverless)."""

    def __init__(
        self,
        target: Any,
        function: str,
        ledger: IamLedger,
        rules: list[dict[str, Any]],
        domain_arn: str,
        collection: str,
        prefix: str = "",
    ):
        self.target, self.function, self.ledger, self.rules = target, function, ledger, rules
        self.domain_arn, self.collection, self.prefix = domain_arn, collection, prefix

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.target, name)
        if name == "indices":
            return CheckedOpenSearch(
                attribute, self.function, self.ledger, self.rules, self.domain_arn, self.collection, "indices."
            )

        def call(*args: Any, **kwargs: Any) -> Any:
            self.check(self.prefix + name, kwargs["index"])
            return attribute(*args, **kwargs)

        return call

    def check(self, operation: str, index: str) -> None:
        method, path, permission = OPENSEARCH_REQUESTS[operation]
        call = f"opensearch:{operation}"
        self.ledger.check(self.function, call, f"es:ESHttp{method.title()}", f"{self.domain_arn}/{index}{path}")
        role = f"arn:aws:iam::{ACCOUNT}:role/{ROLES[self.function]}"
        allowed = any(
            role in rule["Principal"]
            and any(
                permission in r["Permission"]
                and any(_glob(p, f"index/{self.collection}/{index}", case=True) for p in r["Resource"])
                for r in rule["Rules"]
            )
            for rule in self.rules
        )
        with self.ledger.lock:
            self.ledger.checked.append((self.function, permission, f"index/{self.collection}/{index}"))
            if not allowed:
                self.ledger.findings.append(
                    Finding(self.function, call, permission, index, "not in the collection's data access policy")
                )
