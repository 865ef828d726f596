"""Published versions of a function that nothing uses any more. SAM's AutoPublishAlias publishes a
version on every deploy and keeps each one (DeletionPolicy Retain), and SnapStart bills the snapshot
cache of every active version: the janitor's schedule deletes all but the alias's version, the one
before it (to roll back to) and any newer one (a deploy in progress)."""

from __future__ import annotations

from typing import Any

LambdaClient = Any  # boto3 Lambda client


def prune_versions(client: LambdaClient, function: str, alias: str = "live") -> list[str]:
    """Delete the unused versions of `function`; the versions deleted."""
    live = int(client.get_alias(FunctionName=function, Name=alias)["FunctionVersion"])
    versions = sorted(
        int(v["Version"])
        for page in client.get_paginator("list_versions_by_function").paginate(FunctionName=function)
        for v in page["Versions"]
        if v["Version"] != "$LATEST"
    )
    older = [v for v in versions if v < live]
    doomed = older[:-1]  # the newest older one is kept to roll back to
    for version in doomed:
        client.delete_function(FunctionName=function, Qualifier=str(version))
    return [str(v) for v in doomed]
