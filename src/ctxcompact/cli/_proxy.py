"""``ctxcompact proxy``: serve the compaction proxy from a config file (or the defaults), with
the upstreams and the store given on the command line if wanted."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from .._config.config import Config, load_config
from .._config.store import StoreConfig
from ..exceptions import CliError
from ._setup import DEFAULT_STRATEGY

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

__all__ = ["add_proxy_options", "proxy_config", "run_proxy"]

# What the command a proxy serves would otherwise have used (``ctxcompact wrap``).
_UPSTREAM_VARIABLES = (
    ("openai_base_url", "OPENAI_BASE_URL", "--openai-base-url"),
    ("anthropic_base_url", "ANTHROPIC_BASE_URL", "--anthropic-base-url"),
)


def add_proxy_options(parser: argparse.ArgumentParser) -> None:
    """``--config``, the upstreams and the store (or none): what ``proxy`` and ``wrap``
    share."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a ctxcompact TOML config (default: every default; each request's window is then "
        "the one of the model it names)",
    )
    parser.add_argument(
        "--openai-base-url",
        metavar="URL",
        help="where OpenAI-format requests go (default: [proxy] openai_base_url, "
        "https://api.openai.com/v1), e.g. http://127.0.0.1:8080/v1 for a local server",
    )
    parser.add_argument(
        "--anthropic-base-url",
        metavar="URL",
        help="where Anthropic-format requests go (default: [proxy] anthropic_base_url, "
        "https://api.anthropic.com)",
    )
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        help="keep what compaction removes, and summaries once computed, in this SQLite file "
        "(or a store server's URL); replaces [store] path",
    )
    parser.add_argument(
        "--no-store",
        action="store_true",
        help="keep no originals and no summaries ([store] enabled = false); by default they "
        "go to [store] path or url, else a SQLite file in your cache folder (printed at "
        "start-up)",
    )


def proxy_config(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration to serve: ``--config`` (else the defaults, with the strategy
    ``replay`` runs by default), then what the command line sets.

    With ``environ`` (``ctxcompact wrap``), an upstream that neither the command line nor the
    file sets is the one the wrapped command would have used: ``OPENAI_BASE_URL``,
    ``ANTHROPIC_BASE_URL``.

    Raises:
        CliError: A URL that is not ``http://`` or ``https://``; ``--store`` with ``--no-store``.
        ConfigError: The file, or what the command line makes of it, is not valid.
    """
    if args.config is not None:
        base = load_config(args.config)
    else:
        base = Config.from_dict({"compaction": {"strategy": DEFAULT_STRATEGY}})
    data = base.model_dump(exclude_unset=True)
    proxy: dict[str, Any] = dict(data.get("proxy", {}))
    for key, variable, option in _UPSTREAM_VARIABLES:
        given = getattr(args, key)
        if given is not None:
            proxy[key] = _url(given, option)
        elif environ is not None and key not in proxy and environ.get(variable):
            proxy[key] = _url(environ[variable], f"${variable}")
    data["proxy"] = proxy
    if args.no_store:
        if args.store is not None:
            raise CliError("--store and --no-store: give one or the other")
        data["store"] = base.store.disabled().model_dump(exclude_unset=True)
    elif args.store is not None:
        data["store"] = _store(dict(data.get("store", {})), args.store)
    return Config.from_dict(data, path=base.path)


def _url(value: str, where: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise CliError(f"{where} must start with http:// or https://")
    return value


def _store(table: dict[str, Any], value: str) -> dict[str, Any]:
    """``[store]`` with ``value`` as its file, or as its server's URL."""
    if "://" in value:
        if "url" not in StoreConfig.model_fields:
            scheme = value.split("://", 1)[0]
            raise CliError(
                f"--store: this ctxcompact keeps its store in a file, not at a {scheme}:// URL; "
                "give a file path"
            )
        table.pop("path", None)
        table["url"] = value
        return table
    table.pop("url", None)
    # Relative to where the command runs (a [store] path in a file is relative to the file).
    table["path"] = os.path.abspath(os.path.expanduser(value))
    return table


def log_to(handler: logging.Handler, level: int) -> logging.Handler:
    """The ``ctxcompact`` logger's lines to ``handler`` from ``level`` on."""
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("ctxcompact")
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def run_proxy(args: argparse.Namespace) -> int:
    """Load the config and serve until interrupted. Ctrl-C is a clean stop (exit 0).

    Without ``--config``: every default, but the strategy is the one ``replay`` runs by
    default (no summarizer is configured, so the library's LLM-summary default could not
    run), and each request's window comes from its model's name.
    """
    # Deferred: the proxy needs the optional 'proxy' extra (starlette, uvicorn, httpx).
    from ..proxy import serve

    config = proxy_config(args)
    # One line per request (action, tokens before -> after, strategy, error): the proxy's
    # audit trail. Headers are never logged: they carry the API keys.
    log_to(logging.StreamHandler(sys.stderr), logging.INFO)
    serve(config, host=args.host, port=args.port)
    return 0
