"""Translate the SAM template into the plain CloudFormation that CloudFormation deploys.

Usage: python sam_translate.py template.yaml out.json  (needs aws-sam-translator, which aws-sam-cli brings).
Local artifacts become S3 URIs named by the MD5 of their contents (symbolic links followed), as
`sam package` names them, so a change to any file of a function's code changes its URI; the state
machine definition is inlined, so the translation needs no AWS call. Managed policies are not
looked up: the template uses policy templates and statements only. A resource's checkov
suppressions (Metadata.checkov) are kept on the resource SAM makes of it, so checkov reads them.
"""

import json
import sys
from pathlib import Path

import boto3
from samcli.lib.utils.hash import dir_checksum
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

PSEUDO_PARAMETERS = {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
ARTIFACTS = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}


def packaged(template: dict, root: Path) -> dict:
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        uri = ARTIFACTS.get(resource["Type"])
        if uri and isinstance(properties.get(uri), str):
            properties[uri] = f"s3://artifacts/{dir_checksum(str(root / properties[uri]), followlinks=True)}"
        if resource["Type"] == "AWS::Serverless::StateMachine" and "DefinitionUri" in properties:
            properties["Definition"] = json.loads((root / properties.pop("DefinitionUri")).read_text())
    return template


def main(source: str, target: str) -> None:
    path = Path(source)
    template = packaged(yaml_parse(path.read_text()), path.parent)
    session = boto3.session.Session(region_name=PSEUDO_PARAMETERS["AWS::Region"])
    translator = Translator(managed_policy_map={}, sam_parser=Parser(), boto_session=session)
    translated = translator.translate(sam_template=template, parameter_values=dict(PSEUDO_PARAMETERS))
    for name, resource in template["Resources"].items():
        suppressions = resource.get("Metadata", {}).get("checkov")
        if suppressions and name in translated["Resources"]:
            translated["Resources"][name].setdefault("Metadata", {})["checkov"] = suppressions
    Path(target).write_text(json.dumps(translated, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
