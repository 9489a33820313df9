"""``ctxcompact proxy``: serve the compaction proxy from a config file (or the defaults)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from .._config.config import Config, load_config
from ._setup import DEFAULT_STRATEGY

if TYPE_CHECKING:
    import argparse


def run_proxy(args: argparse.Namespace) -> int:
    """Load the config and serve until interrupted. Ctrl-C is a clean stop (exit 0).

    Without ``--config``: every default, but the strategy is the one ``replay`` runs by
    default (no summarizer is configured, so the library's LLM-summary default could not
    run), and each request's window comes from its model's name.
    """
    # Deferred: the proxy needs the optional 'proxy' extra (starlette, uvicorn, httpx).
    from ..proxy import serve

    if args.config is not None:
        config = load_config(args.config)
    else:
        config = Config.from_dict({"compaction": {"strategy": DEFAULT_STRATEGY}})
    if args.no_store:
        config = config.model_copy(update={"store": config.store.disabled()})
    # One line per request (action, tokens before -> after, strategy, error): the proxy's
    # audit trail. Headers are never logged: they carry the API keys.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("ctxcompact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    serve(config, host=args.host, port=args.port)
    return 0
