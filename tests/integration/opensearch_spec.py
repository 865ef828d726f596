"""Request bodies checked against the official OpenSearch API specification (OpenAPI 3.1, YAML).

Each YAML file of the spec is a resource of one `referencing.Registry`, addressed by its file
URI and loaded on first use, so cross-file references such as
`../schemas/_common.yaml#/components/schemas/Field` resolve as ordinary JSON Schema 2020-12
`$ref`s. OpenAPI's own keywords (`discriminator`, `x-*`) are annotations that jsonschema ignores.
Bodies are checked after a JSON round trip, exactly as the client would send them.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

REPO = Path(__file__).resolve().parents[2]
SPEC_DIR = Path(os.environ.get("OPENSEARCH_API_SPEC", REPO.parent / "shared" / "opensearch-api-spec")) / "spec"

_WITH_SOURCE = {"index", "create", "update"}


@cache
def _load(uri: str) -> Resource:
    path = Path(uri.removeprefix("file://"))
    contents = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    return Resource.from_contents(contents, default_specification=DRAFT202012)


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


class OpenSearchSpec:
    """Operations (by `x-operation-group`, e.g. `search`, `indices.create`) and their schemas."""

    def __init__(self, root: Path = SPEC_DIR):
        self.root = root
        self.registry: Registry = Registry(retrieve=_load)

    def _uri(self, relative: str) -> str:
        return (self.root / relative).resolve().as_uri()

    def _namespace(self, group: str) -> str:
        return self._uri(f"namespaces/{group.split('.')[0] if '.' in group else '_core'}.yaml")

    def operations(self, group: str) -> list[dict[str, Any]]:
        """Every path and method variant of one operation group."""
        paths = _load(self._namespace(group)).contents["paths"]
        found = [op for item in paths.values() for op in item.values() if op.get("x-operation-group") == group]
        if not found:
            raise KeyError(f"no operation group {group!r} in the spec")
        return found

    def _check(self, instance: Any, ref: str) -> None:
        Draft202012Validator({"$ref": ref}, registry=self.registry).validate(_as_json(instance))

    def request_body_ref(self, group: str) -> str:
        """The absolute `$ref` of the operation's request body schema."""
        body_ref = self.operations(group)[0]["requestBody"]["$ref"]
        resolved = self.registry.resolver(base_uri=self._namespace(group)).lookup(body_ref)
        (media,) = resolved.contents["content"]
        return f"{self._namespace(group)}{body_ref}/content/{media.replace('/', '~1')}/schema"

    def validate_body(self, group: str, body: Any) -> None:
        """Raise jsonschema.ValidationError unless the spec accepts `body` for this operation."""
        self._check(body, self.request_body_ref(group))

    def component(self, schema_file: str, name: str) -> dict[str, Any]:
        return _load(self._uri(f"schemas/{schema_file}")).contents["components"]["schemas"][name]

    def validate_component(self, schema_file: str, name: str, instance: Any) -> None:
        self._check(instance, f"{self._uri(f'schemas/{schema_file}')}#/components/schemas/{name}")

    def query_parameters(self, group: str) -> dict[str, str]:
        """Name -> schema `$ref` of every query parameter the operation group declares."""
        base = self._namespace(group)
        resolver = self.registry.resolver(base_uri=base)
        declared = {}
        for op in self.operations(group):
            for param in op.get("parameters", []):
                found = resolver.lookup(param["$ref"]).contents
                if found["in"] == "query":
                    declared[found["name"]] = f"{base}{param['$ref']}/schema"
        return declared

    def validate_params(self, group: str, params: dict[str, Any]) -> None:
        """Each query parameter must be declared by the operation and match its schema."""
        declared = self.query_parameters(group)
        for name, value in params.items():
            if name not in declared:
                raise ValidationError(f"{group} has no query parameter {name!r}")
            self._check(value, declared[name])

    def validate_bulk(self, lines: list[Any]) -> None:
        """The NDJSON lines as a whole, then each action against `OperationContainer`.

        The container allows any one key, so the action name is also checked against its
        declared properties; index, create and update actions must be followed by a source.
        """
        self.validate_body("bulk", lines)
        actions = set(self.component("_core.bulk.yaml", "OperationContainer")["properties"])
        position = 0
        while position < len(lines):
            line = lines[position]
            self.validate_component("_core.bulk.yaml", "OperationContainer", line)
            (action,) = line
            if action not in actions:
                raise ValidationError(f"unknown bulk action {action!r}")
            if action in _WITH_SOURCE and not (position + 1 < len(lines) and isinstance(lines[position + 1], dict)):
                raise ValidationError(f"bulk {action!r} at line {position} has no source")
            position += 2 if action in _WITH_SOURCE else 1
