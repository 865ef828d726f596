"""Where ragmcp's log lines go: readable text on a terminal or a local service, JSON on Lambda.

Libraries that log their own workings at INFO (faiss's loader tries three builds and logs each
miss with a ModuleNotFoundError; the MCP SDK logs three lines per stateless request) are held
to warnings unless `--verbose` asks for everything.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

NOISY = {
    "faiss.loader": logging.WARNING,
    "httpx": logging.WARNING,
    "mcp.server": logging.WARNING,
    "pypdf": logging.ERROR,
}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def quiet_libraries(verbose: bool = False) -> None:
    for name, level in NOISY.items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else level)


def configure_text(verbose: bool = False) -> None:
    """The command line and `ragmcp serve`: one readable line per record on stderr."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=TEXT_FORMAT, stream=sys.stderr)
    quiet_libraries(verbose)


def configure_lambda(logger: Logger) -> None:
    """A Lambda function: ragmcp's own records go through the function's Powertools logger, as
    JSON lines with the invocation's keys (request id, correlation id, cold start)."""
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    logging.getLogger("ragmcp")  # registered, so its children's records are formatted too
    copy_config_to_registered_loggers(source_logger=logger, include={"ragmcp"})
    quiet_libraries()
