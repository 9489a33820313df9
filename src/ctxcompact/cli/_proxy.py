"""``ctxcompact proxy``: serve the compaction proxy from a config file (or the defaults)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse


def run_proxy(args: argparse.Namespace) -> int:
    """Load the config (every default without ``--config``) and serve until interrupted.

    Ctrl-C is a clean stop (exit 0).
    """
    from .._config import Config, load_config
    from ..proxy import serve

    config = load_config(args.config) if args.config is not None else Config()
    # One line per request (action, tokens before -> after, strategy, error): the proxy's
    # audit trail. Headers are never logged: they carry the API keys.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("ctxcompact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    serve(config, host=args.host, port=args.port)
    return 0
