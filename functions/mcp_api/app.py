"""API Gateway (HTTP API) -> Mangum -> the FastAPI app of ragmcp.http. Built once per container."""

from mangum import Mangum

from ragmcp.bootstrap import build_services
from ragmcp.http import create_app
from ragmcp.mcp.server import build_registry
from ragmcp.settings import Settings

_services = build_services(Settings())
handler = Mangum(create_app(_services, build_registry(_services)), lifespan="off")
