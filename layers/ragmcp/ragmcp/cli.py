"""ragmcp serve | ingest | reindex | stdio | connect | keys | jobs | users | audit | doctor, and where the
development tools (package ragmcp_bench) are installed: bench | eval | eval-qa | eval-floor | eval-parse |
eval-guards."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragmcp.connect import CLIENTS
from ragmcp.domain.errors import RagError
from ragmcp.logs import configure_text
from ragmcp.progress import Progress
from ragmcp.settings import Settings, SettingsError, settings_from_args

if TYPE_CHECKING:
    from ragmcp.bootstrap import Operator


def cmd_serve(args: argparse.Namespace) -> int:
    from ragmcp.serve import Refused, serve

    try:
        serve(
            settings_from_args(args),
            replace=args.replace,
            no_watch=args.no_watch,
            allow_mass_delete=args.allow_mass_delete,
        )
    except Refused as exc:
        print(f"ragmcp serve: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from ragmcp.bootstrap import OPERATOR_SETTINGS, Operator
    from ragmcp.domain.models import Tier
    from ragmcp.security.models import RateLimits

    services = Operator(settings_from_args(args, OPERATOR_SETTINGS))
    if args.action == "create":
        limits = RateLimits(per_minute=args.rate, synthesis_per_minute=args.synthesis_rate, concurrent=args.concurrent)
        # A key bound to a directory user reads at the user's tier unless --max-tier caps it.
        max_tier = args.max_tier or ("privileged" if args.user else "standard")
        created = services.keys.create(
            args.tenant,
            name=args.name,
            scopes=tuple(s for s in args.scopes.split(",") if s),
            max_tier=Tier(max_tier),
            limits=limits,
            user=args.user,
            platform=args.platform,
            key_format=args.format,
        )
        print(f"key id:  {created.key.key_id}")
        print(f"tenant:  {created.key.tenant}")
        print(f"acts as: {_acts_as(created.key)}")
        print(f"secret:  {created.secret}")
        print("The secret is shown only now; ragmcp keeps only its SHA-256 hash.", file=sys.stderr)
        if services.database is not None:
            _warn_if_empty(services, created.key.tenant)
    elif args.action == "list":
        for key in services.keys.store.list():
            state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
            print(
                f"{key.key_id}  tenant={key.tenant}  name={key.name!r}  acts_as={_acts_as(key)}  "
                f"scopes={','.join(key.scopes)}  "
                f"max_tier={key.max_tier.value}  limits={key.limits.per_minute}/{key.limits.synthesis_per_minute}"
                f"/{key.limits.concurrent}  {state}"
            )
    else:
        revoked = services.keys.revoke(args.key_id)
        print(f"revoked {revoked.key_id}")
    return 0


def _warn_if_empty(services: Operator, tenant: str) -> None:
    """A key of a tenant with no documents finds nothing: say so, and where the documents are."""
    documents = services.documents
    if documents.count(tenant):
        return
    others = ", ".join(repr(t) for t in documents.tenants()) or "none"
    print(
        f"note: tenant {tenant!r} holds no documents yet, so this key finds nothing (tenants with documents: "
        f"{others}); add some with `ragmcp ingest <folder> --tenant {tenant}` or `ragmcp serve --docs <folder> "
        f"--tenant {tenant}`",
        file=sys.stderr,
    )


def cmd_jobs(args: argparse.Namespace) -> int:
    from ragmcp.bootstrap import DEAD_LETTERS_SETTINGS, build_dead_letters

    dead_letters = build_dead_letters(settings_from_args(args, DEAD_LETTERS_SETTINGS))
    moved = dead_letters.redrive(args.limit)
    print(f"moved {moved} change events back to the ingest queue; {dead_letters.waiting()} still waiting")
    return 0


def _acts_as(key) -> str:
    """platform (names the end user per request), user:<id> (bound), or key:<key_id> (its own user)."""
    from ragmcp.security.keys import self_identity

    if "assert-identity" in key.scopes:
        return "platform"
    return f"user:{key.user}" if key.user else self_identity(key.key_id)


def cmd_users(args: argparse.Namespace) -> int:
    from ragmcp.bootstrap import OPERATOR_SETTINGS, Operator
    from ragmcp.domain.models import Tier, UserRecord

    services = Operator(settings_from_args(args, OPERATOR_SETTINGS))
    tenant = args.tenant or "default"
    user = services.users.get(tenant, args.user_id)
    if args.groups is None and args.max_tier is None:  # a look-up: shown, never changed
        if user is None:
            print(
                f"ragmcp users: no user {args.user_id} in tenant {tenant} (give --groups or --max-tier to add one)",
                file=sys.stderr,
            )
            return 1
    else:
        changes: dict[str, Any] = {}
        if args.groups is not None:
            changes["groups"] = tuple(g for g in args.groups.split(",") if g)
        if args.max_tier is not None:
            changes["max_tier"] = Tier(args.max_tier)
        user = (user or UserRecord(tenant=tenant, user_id=args.user_id)).model_copy(update=changes)
        services.users.put(user)
    print(f"{user.user_id}: groups={','.join(user.groups)} max_tier={user.max_tier.value}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from ragmcp.bootstrap import OPERATOR_SETTINGS, Operator

    check = Operator(settings_from_args(args, OPERATOR_SETTINGS)).audit.verify()
    if not check.ok:
        print(f"audit trail BROKEN: {check.problem}", file=sys.stderr)
        return 1
    print(
        f"audit trail intact: {check.records} records in {check.chains} chains, "
        f"{check.checkpoints} checkpoints; {check.unvouched} records newer than the last checkpoint"
    )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragmcp.adapters.local.recovery import WriterLock, redo_all
    from ragmcp.bootstrap import start_local
    from ragmcp.progress import shown
    from ragmcp.serve import folder_problem, folder_source, holdings

    settings = settings_from_args(args)
    target = Path(args.path).resolve()
    if not target.exists():
        print(f"ragmcp ingest: no such file or folder: {args.path} (nothing was changed)", file=sys.stderr)
        return 2
    folder = target if target.is_dir() else target.parent
    problem = folder_problem(folder)
    if problem is not None:
        print(f"ragmcp ingest: {problem}", file=sys.stderr)
        return 2
    holder = WriterLock(settings.server.data_dir).holder()
    services, redo = start_local(settings)
    assert services.database is not None
    existing_source = services.sources.get(settings.server.tenant, settings.server.source)
    if holder is not None and existing_source is not None and existing_source.location != str(folder):
        print(
            f"ragmcp ingest: source {settings.server.source!r} is {existing_source.location}, served by `ragmcp serve` "
            f"(pid {holder}); nothing was changed. Ingest {folder} as a source of its own (--source NAME), or stop "
            "the server first",
            file=sys.stderr,
        )
        return 2
    redo_all(services.ingest, services.sources, redo, services.jobs)
    source, replaced = folder_source(services, settings, folder, args.replace)
    print(
        f"ingesting {target} as source {source.source_id!r} of tenant {source.tenant!r} into "
        f"{settings.server.data_dir.resolve()}",
        file=sys.stderr,
    )
    if target.is_dir():
        with shown(Progress("files")) as progress:
            report = services.ingest.sync(source, progress, allow_mass_delete=args.allow_mass_delete or replaced)
        jobs = report.jobs
        print(report.line())
        if report.held:
            print(
                f"held: {report.held} deletions (too many files vanished at once); if they were removed on "
                "purpose, run again with --allow-mass-delete",
                file=sys.stderr,
            )
    else:
        job = services.ingest.ingest(source, target.name)
        jobs = [job] if job else []
        print("1 ingested" if job and job.status == "succeeded" else "0 ingested (unchanged or failed)")
    print(f"ragmcp ingest: {holdings(services, settings)}", file=sys.stderr)
    for job in jobs:
        if job.status == "failed":
            print(f"failed: {job.target}: {job.error}", file=sys.stderr)
    return 1 if any(j.status == "failed" for j in jobs) and args.strict else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ragmcp.doctor import diagnose

    settings = settings_from_args(args)
    if not settings.server.db_path.exists():
        print(f"no database at {settings.server.db_path}: nothing to check (`ragmcp ingest <folder>` creates it)")
        return 1
    findings = diagnose(settings)
    for finding in findings:
        print(finding.line())
    if not findings:
        print(f"{settings.server.data_dir}: database, full-text index, vector graph, keys and jobs are sound")
    return 1 if findings else 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from ragmcp.bootstrap import build_services

    services = build_services(settings_from_args(args), reindex=True)
    state = "rebuilt for" if services.reindexed else "already up to date with"
    print(f"index {state} this server's schema and embedding model")
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    import anyio
    from mcp.server.stdio import stdio_server

    from ragmcp.bootstrap import build_registry, build_services
    from ragmcp.mcp.caller import Caller, current_caller
    from ragmcp.mcp.resources import DocumentResources
    from ragmcp.mcp.server import PROFILES, build_server
    from ragmcp.security.identity import open_credential
    from ragmcp.serve import holdings

    if args.profile is not None and args.profile not in PROFILES:
        print(f"ragmcp stdio: unknown profile {args.profile!r}; profiles: {', '.join(PROFILES)}", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    services = build_services(settings)
    print(f"ragmcp stdio: {holdings(services, settings)}", file=sys.stderr)  # stdout carries the protocol
    resources = DocumentResources(services.catalog, services.audit, settings.server.resource_page_size)
    server = build_server(build_registry(services), args.profile, resources)

    async def run() -> None:
        # stdio answers the local user who started it, who holds the files anyway: the open credential.
        current_caller.set(Caller(credential=open_credential(settings.server.tenant), identities=services.identities))
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        services.audit.close()
    return 0


def cmd_connect(args: argparse.Namespace) -> int:
    from ragmcp.connect import client_config, stdio_config
    from ragmcp.mcp.server import PROFILES

    if args.profile is not None and args.profile not in PROFILES:
        print(f"ragmcp connect: unknown profile {args.profile!r}; profiles: {', '.join(PROFILES)}", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    if args.stdio:
        program = shutil.which("ragmcp")
        command = [program] if program else [sys.executable, "-m", "ragmcp.cli"]
        command += ["--data-dir", str(settings.server.data_dir.resolve()), "stdio"]
        command += ["--tenant", settings.server.tenant] + (["--profile", args.profile] if args.profile else [])
        config = stdio_config(args.client, command)
        print(
            f"# ragmcp stdio answers as tenant {settings.server.tenant!r} of {settings.server.data_dir.resolve()}",
            file=sys.stderr,
        )
    else:
        url = args.url or f"{settings.server.base_url}/mcp" + (f"/{args.profile}" if args.profile else "")
        config = client_config(args.client, url, args.key)
    print(config.text)
    print(f"# {args.client}: {config.where}", file=sys.stderr)
    tenant = _key_tenant(settings, args.key) if args.key else None
    if tenant is not None:
        print(f"# the key reads tenant {tenant!r}", file=sys.stderr)
    return 0


def _key_tenant(settings: Settings, secret: str) -> str | None:
    """The tenant of a key of this machine's index (None when it is not one, or there is no index)."""
    from ragmcp.bootstrap import Operator

    if not settings.server.db_path.exists():
        return None
    key = Operator(settings).keys.authenticate(secret)
    return key.tenant if key is not None else None


DEV_COMMANDS = ("bench", "eval", "eval-qa", "eval-floor", "eval-parse", "eval-guards")
"""The development tools' commands, defined by ragmcp_bench.cli (installed by the test and bench extras,
never shipped to Lambda)."""


def _dev_tools_missing(args: argparse.Namespace) -> int:
    print(
        f"ragmcp {args.command}: a development tool (package ragmcp_bench) that is not installed here: "
        "install the test or bench extra (pip install -e '.[bench]' in a checkout)",
        file=sys.stderr,
    )
    return 2


def _add_dev_commands(sub: argparse._SubParsersAction) -> None:
    """The development tools' commands where ragmcp_bench is installed; else each of them, whatever its
    arguments, says how to install them."""
    try:
        from ragmcp_bench.cli import add_commands
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "ragmcp_bench":
            raise
        for name in DEV_COMMANDS:
            missing = sub.add_parser(name, add_help=False, help="(development tool: install the test or bench extra)")
            missing.set_defaults(func=_dev_tools_missing)
    else:
        add_commands(sub)


REPLACE_HELP = (
    "when the source (--source, default 'docs') already reads another folder: read this one instead and delete"
    " the documents whose files it does not hold (refused without it)"
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="ragmcp", description="RAG over MCP for your own documents.")
    top.add_argument("--data-dir", type=Path, help="where the index lives (RAGMCP_DATA_DIR, default .ragmcp/)")
    top.add_argument("-v", "--verbose", action="store_true")
    sub = top.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve MCP over HTTP, ingesting and watching a folder")
    serve.add_argument("--docs", type=Path, help="folder to ingest and watch (RAGMCP_DOCS)")
    serve.add_argument("--host", help="listen address (RAGMCP_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (RAGMCP_PORT, default 8000)")
    serve.add_argument("--tenant", help="tenant that owns the folder (default 'default')")
    serve.add_argument("--source", help="source id of the folder (default 'docs')")
    serve.add_argument("--no-watch", action="store_true", help="ingest once, do not watch for changes")
    serve.add_argument("--replace", action="store_true", help=REPLACE_HELP)
    serve.add_argument(
        "--workers",
        type=int,
        help="processes answering requests (RAGMCP_WORKERS, default 1): the first ingests and keeps the vector"
        " graph, the others read; one per core uses every core",
    )
    serve.add_argument(
        "--open",
        action="store_true",
        help="answer requests without an API key (127.0.0.1 only, to try ragmcp; RAGMCP_OPEN)",
    )
    serve.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="apply deletions even when most of the folder's files vanished at once (held otherwise)",
    )
    serve.set_defaults(func=cmd_serve)

    ingest = sub.add_parser("ingest", help="ingest a file or a folder")
    ingest.add_argument("path")
    ingest.add_argument("--tenant", help="tenant that owns the documents (default 'default')")
    ingest.add_argument("--source", help="source id (default 'docs')")
    ingest.add_argument("--strict", action="store_true", help="exit 1 when any file failed")
    ingest.add_argument("--replace", action="store_true", help=REPLACE_HELP)
    ingest.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="apply deletions even when most of the folder's files vanished at once (held otherwise)",
    )
    ingest.set_defaults(func=cmd_ingest)

    reindex = sub.add_parser(
        "reindex",
        help="bring an index built by an older ragmcp or another embedding model up to date (keeps every document)",
    )
    reindex.set_defaults(func=cmd_reindex)

    stdio = sub.add_parser("stdio", help="serve MCP over stdin/stdout for a local agent")
    stdio.add_argument("--profile", help="expose one profile's tools only")
    stdio.add_argument("--tenant", help="the tenant it answers as (default 'default')")
    stdio.set_defaults(func=cmd_stdio)
    connect = sub.add_parser("connect", help="print an MCP client's configuration for this server")
    connect.add_argument("client", choices=CLIENTS)
    connect.add_argument("--url", help="the server's MCP URL (default: RAGMCP_PUBLIC_URL or host:port, + /mcp)")
    connect.add_argument("--key", help="an API key to send as `Authorization: Bearer` (none: an open server)")
    connect.add_argument("--profile", help="connect to one profile's tools only (/mcp/<profile>)")
    connect.add_argument(
        "--stdio",
        action="store_true",
        help="have the client start `ragmcp stdio` on this data directory (absolute) instead of reaching a server",
    )
    connect.add_argument("--tenant", help="with --stdio: the tenant it answers as (default 'default')")
    connect.set_defaults(func=cmd_connect)

    # Where the keys, users and jobs live: this machine's index, or a deployed stack's tables
    # (AWS credentials and RAGMCP_KEYS_TABLE, RAGMCP_CATALOG_TABLE, ... from the stack's outputs).
    backend = argparse.ArgumentParser(add_help=False)
    backend.add_argument("--backend", choices=["local", "aws"], help="local (default) or a deployed AWS stack")
    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    key_actions = keys.add_subparsers(dest="action", required=True)
    create = key_actions.add_parser("create", parents=[backend], help="create a key (its secret is shown once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", default="")
    create.add_argument("--scopes", default="read,write", help="comma-separated: read, write, admin")
    create.add_argument(
        "--max-tier",
        choices=["standard", "confidential", "privileged"],
        help="highest tier the key may read (default: standard; with --user: the user's own tier)",
    )
    acts = create.add_mutually_exclusive_group()
    acts.add_argument("--user", help="the user of the user directory the key acts for (its groups and tier)")
    acts.add_argument(
        "--platform",
        action="store_true",
        help="a platform key: names the end user per request (x-user-id, username), capped by the directory",
    )
    create.add_argument(
        "--format",
        choices=["ragmcp", "ragbox"],
        default="ragmcp",
        help="the secret's shape: rmcp_<env>_<64 hex> (default) or ragbox's rbx_live_<64 hex>",
    )
    create.add_argument("--rate", type=int, default=60, help="requests a minute")
    create.add_argument("--synthesis-rate", type=int, default=10, help="synthesis calls a minute")
    create.add_argument("--concurrent", type=int, default=5, help="concurrent requests")
    key_actions.add_parser("list", parents=[backend], help="list keys (never their secrets)")
    revoke = key_actions.add_parser("revoke", parents=[backend], help="revoke a key")
    revoke.add_argument("key_id")
    keys.set_defaults(func=cmd_keys)

    jobs = sub.add_parser("jobs", help="ingest jobs on AWS")
    job_actions = jobs.add_subparsers(dest="action", required=True)
    redrive = job_actions.add_parser(
        "redrive", parents=[backend], help="move the dead-letter queue's change events back to the ingest queue"
    )
    redrive.add_argument("--limit", type=int, default=10_000, help="move at most this many")
    jobs.set_defaults(func=cmd_jobs)

    users = sub.add_parser(
        "users", parents=[backend], help="show a user of the user directory; add or change one with --groups/--max-tier"
    )
    users.add_argument("user_id")
    users.add_argument("--tenant")
    users.add_argument("--groups", help='comma-separated groups (replace the user\'s; "" for none)')
    users.add_argument(
        "--max-tier",
        choices=["standard", "confidential", "privileged"],
        help="highest tier the user may read (a new user: standard)",
    )
    users.set_defaults(func=cmd_users)

    audit = sub.add_parser("audit", help="check the audit trail against its key and checkpoints")
    audit.add_argument("action", choices=["verify"])
    audit.set_defaults(func=cmd_audit)

    doctor = sub.add_parser("doctor", help="check the data directory: what is wrong and what to run")
    doctor.set_defaults(func=cmd_doctor)

    _add_dev_commands(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args, unknown = top.parse_known_args(argv)
    if args.func is _dev_tools_missing:
        return _dev_tools_missing(args)
    if unknown:
        top.error(f"unrecognized arguments: {' '.join(unknown)}")
    configure_text(args.verbose)
    try:
        return args.func(args)
    except SettingsError as exc:
        print(f"ragmcp: {exc}", file=sys.stderr)
        return 2
    except RagError as exc:
        print(f"ragmcp: {exc.message}", file=sys.stderr)
        return 2
    except Exception as exc:
        from ragmcp.ingest.jobs import out_of_space

        if not out_of_space(exc):
            raise
        # A write that met the full disk was rolled back; what the command finished before it stays.
        print(f"ragmcp: the disk is full ({exc}): free space and run the command again", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
