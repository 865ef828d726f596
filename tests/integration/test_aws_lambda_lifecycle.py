"""What Lambda's execution model does to work a long-running server does in the background or at
start-up, on the AWS emulator's MCP function:

- Lambda freezes the process between invocations (and Mangum runs with lifespan "off", so nothing
  runs at shutdown): a checkpoint thread that waits its interval may never run. The handler writes
  the audit checkpoint itself once it is due.
- SnapStart restores every instance from one snapshot taken after init: whatever random state init
  made (the console's signing secret, Python's `random` state behind retry jitter) would be the same
  in every instance. The handler module registers an after-restore hook that makes them anew.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from ragmcp.adapters.aws.audit import CHECKPOINTS
from ragmcp.security.audit import Checkpointer

from .aws_harness import AwsEmulator, call, running_emulator, tool_payload

INTERVAL = 1.0


class Clock:
    """The audit trail's monotonic clock, moved by the test: whether a checkpoint is due does not
    depend on how long the calls take on a loaded machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


CLOCK = Clock()


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory):
    patch = pytest.MonkeyPatch()
    patch.setenv("RAGMCP_AUDIT_CHECKPOINT_SECONDS", str(INTERVAL))
    patch.setattr("ragmcp.security.audit.time", SimpleNamespace(monotonic=CLOCK.monotonic))
    # Frozen between invocations: the checkpoint thread never gets to run.
    patch.setattr(Checkpointer, "_run", lambda self: None)
    yield from running_emulator(tmp_path_factory)
    patch.undo()


def checkpoints(aws: AwsEmulator) -> int:
    bucket = aws.functions["mcp_api"].services.settings.aws.audit_archive_bucket
    return aws.s3.list_objects_v2(Bucket=bucket, Prefix=CHECKPOINTS).get("KeyCount", 0)


def test_a_due_checkpoint_is_written_by_the_handler_without_a_thread_or_shutdown(aws: AwsEmulator) -> None:
    tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb"))
    first = checkpoints(aws)
    CLOCK.now += INTERVAL + 0.2
    tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb"))
    assert checkpoints(aws) > first, "the audit heads moved and the interval passed: a checkpoint is due"
    tool_payload(aws.mcp(call("kb_status", {}), "/mcp/kb"))
    assert checkpoints(aws) == first + 1, "not due again before the next interval"


def test_snapstart_restore_makes_secrets_and_jitter_anew(aws: AwsEmulator) -> None:
    module = aws.functions["mcp_api"]
    before_secret = module.app.state.console_sessions.secret
    assert before_secret == module.services.console_secret  # what the snapshot holds
    state = random.getstate()
    module.after_restore()  # what SnapStart's runtime calls in each restored instance
    secret = module.app.state.console_sessions.secret
    assert secret != before_secret and len(secret) == 32
    assert random.getstate() != state
