"""The operator's commands (`ragmcp keys | users | audit | connect --key`) ask bootstrap.Operator for the
parts they use: the embedded index's key store, user directory, documents and audit trail, each made on
first use, with no embedder, index check or MCP part."""

from __future__ import annotations

from pathlib import Path

from ragmcp.bootstrap import Operator
from ragmcp.domain.models import Tier, UserRecord
from ragmcp.settings import Settings


def test_the_operators_parts_share_the_local_index(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = Operator(settings)
    created = first.keys.create("acme", name="ops")
    first.users.put(UserRecord(tenant="acme", user_id="u1", groups=("eng",), max_tier=Tier.confidential))
    again = Operator(settings)  # another command, later: the same database
    found = again.keys.authenticate(created.secret)
    assert found is not None and found.tenant == "acme"
    user = again.users.get("acme", "u1")
    assert user is not None and user.groups == ("eng",) and user.max_tier is Tier.confidential
    assert again.documents.count("acme") == 0
    check = again.audit.verify()
    assert check.ok and check.records == 0
    assert again.database is not None and again.database.path == settings.server.db_path


def test_the_operators_parts_are_made_on_first_use(tmp_path: Path) -> None:
    operator = Operator(Settings(data_dir=tmp_path / "data"))
    assert not (tmp_path / "data").exists()  # nothing made yet
    operator.keys.store.list()
    assert "users" not in vars(operator) and "audit" not in vars(operator)  # only what was asked for
