"""The ``ctxcompact`` command line: apply, replay, validate, strategies, proxy, wrap.

``ctxcompact replay`` with no file replays a demo conversation that ships with the package,
so the first command works on a fresh machine without an API key. Exit codes: 0 success,
1 the command found a problem (invalid history, failed compaction), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from .._defaults import REPLAY_MAX_CONTEXT_SIZE, REPLAY_RESERVED_CONTEXT_SIZE
from ..exceptions import CtxCompactError
from ._io import FORMATS, CliError
from ._proxy import add_proxy_options
from ._setup import DEFAULT_STRATEGY

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]


class _ParamAction(argparse.Action):
    """``--param`` remembers which ``--strategy`` it follows: ``(index, "key=value")``,
    index -1 before any ``--strategy`` (it then applies to every strategy)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        strategies = getattr(namespace, "strategy", None)
        index = len(strategies) - 1 if isinstance(strategies, list) else -1
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), (index, str(values))])


def _params_for(args: argparse.Namespace, index: int) -> list[str]:
    """The ``--param`` values that apply to the ``index``-th ``--strategy`` (0 if one)."""
    return [value for at, value in args.param if at in (-1, index)]


def _add_input(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="input format (default: detected: JSON list = openai, one object per line = "
        "jsonl, a body with 'system' or Anthropic blocks = anthropic, a Claude Code session "
        "log = claude-code, Responses items (a list or a body with 'input') = responses, a "
        "Codex rollout or JSON Lines of Responses items = codex)",
    )


def _add_strategy(parser: argparse.ArgumentParser, *, default_note: str, many: bool) -> None:
    parser.add_argument(
        "--strategy",
        metavar="SPEC",
        action="append",  # with many=False, given twice is refused (never the last one kept)
        help=f"entry-point name or module:Class ({default_note})"
        + (
            "; repeat it to compare strategies (a --param after a --strategy applies to that "
            "one; before any --strategy, to all)"
            if many
            else ""
        ),
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        help="a ctxcompact TOML config: strategy, limits, params, LLM, transforms"
        + (
            "; repeat it to compare configurations at one window (then without --strategy; "
            "a --param applies to each)"
            if many
            else ""
        ),
    )
    parser.add_argument(
        "--param",
        action=_ParamAction,
        default=[],
        metavar="KEY=VALUE",
        help="a strategy parameter; VALUE is parsed as a TOML/JSON literal, else a string "
        "(repeatable)",
    )
    parser.add_argument(
        "--max-context-size",
        type=int,
        metavar="N",
        help=f"context window in tokens (default: the config's, else {REPLAY_MAX_CONTEXT_SIZE:,})",
    )
    parser.add_argument(
        "--reserved",
        type=int,
        metavar="N",
        help=f"tokens kept free; compaction fires when tokens + N >= the window (default: "
        f"the config's, else {REPLAY_RESERVED_CONTEXT_SIZE:,})",
    )
    parser.add_argument(
        "--token-counter",
        choices=("heuristic", "tiktoken"),
        help="how tokens are counted (default: the config's, else heuristic)",
    )
    parser.add_argument(
        "--llm-base-url",
        metavar="URL",
        help="an OpenAI-compatible summarizer for strategies that summarize (with --llm-model; "
        "replaces the config's [compaction.llm]), e.g. http://127.0.0.1:8080/v1",
    )
    parser.add_argument("--llm-model", metavar="NAME", help="the summarizer's model name")
    parser.add_argument(
        "--llm-context-window",
        type=int,
        metavar="N",
        help="the summarizer model's own window in tokens: its request and summary are fitted "
        "to it (default: the model table's, if it knows --llm-model)",
    )
    parser.add_argument(
        "--llm-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds one summarizer request may take before it fails (default: the config's "
        "[compaction.llm] timeout, else 60; a local CPU model may need minutes)",
    )
    parser.add_argument(
        "--llm-retries",
        type=int,
        metavar="N",
        help="times a failed summarizer request is retried (default: the config's "
        "[compaction.llm] max_retries, else 2)",
    )
    parser.add_argument(
        "--llm-api-key-env",
        metavar="VAR",
        help="the environment variable holding the summarizer's API key (default: "
        "OPENAI_API_KEY; none needed for a local server given by --llm-base-url)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log every compaction event of the controller to standard error",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ctxcompact`` (exposed for documentation and tests)."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="ctxcompact",
        description="Compact LLM conversation histories; replay recordings to see what "
        "strategies save and cost.",
    )
    parser.add_argument("--version", action="version", version=f"ctxcompact {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    apply = commands.add_parser(
        "apply",
        help="compact a conversation once and report what changed",
        description="Run the strategy once (forced) and the per-request transforms, then "
        "report Schema 1's benchmark fields. -o writes the result in the input's format.",
    )
    apply.add_argument("file", metavar="FILE")
    _add_input(apply)
    _add_strategy(apply, default_note="required unless --config names one", many=False)
    apply.add_argument(
        "-o", "--output", metavar="OUT", help="write the compacted conversation ('-': stdout)"
    )
    apply.set_defaults(run="apply")

    replay = commands.add_parser(
        "replay",
        help="replay conversations call by call: tokens and cache-adjusted cost",
        description="Every assistant message is a model call whose input is the history "
        "before it after compaction and transforms. Reports calls, compactions, input and "
        "peak tokens, cache-adjusted cost and cache breaks against no compaction. A FILE may "
        "be a folder (its .json and .jsonl files); .meta.json sidecars are left out. With no "
        "FILE, replays the built-in demo.",
    )
    replay.add_argument("files", nargs="*", metavar="FILE")
    _add_input(replay)
    _add_strategy(replay, default_note=f"default: {DEFAULT_STRATEGY}", many=True)
    replay.add_argument(
        "--cached-price",
        type=float,
        default=0.1,
        metavar="P",
        help="price of a cached input token relative to an uncached one (default: 0.1)",
    )
    replay.add_argument(
        "--pricing",
        default="flat",
        metavar="NAME",
        help="bill the prompt cache as a provider does: flat (--cached-price, no write premium, "
        "no expiry), anthropic (writes 1.25x, reads 0.1x, 5-minute TTL), anthropic-1h, openai "
        "(gpt-5: reads 0.1x), openai-gpt-4.1 (0.25x), openai-gpt-4o (0.5x), or a "
        "[pricing.NAME] table of --config (default: flat)",
    )
    replay.add_argument(
        "--mode",
        choices=("agent", "proxy"),
        default="agent",
        help="agent: the stored history is compacted (an agent loop); proxy: every call starts "
        "from the whole recording, as the stateless proxy sees each request (default: agent)",
    )
    replay.add_argument("--plot", metavar="OUT.png", help="draw context tokens per call")
    replay.add_argument("--no-progress", action="store_true", help="no progress bar")
    replay.add_argument(
        "--no-store",
        action="store_true",
        help="no originals store ([store] enabled = false): nothing removed can be recalled "
        "(a replay never writes a store file: its stores are in memory, one per conversation)",
    )
    replay.set_defaults(run="replay")

    validate = commands.add_parser(
        "validate",
        help="check histories for broken tool-call structure",
        description="Report check_history problems; exit 1 when any file has one.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    _add_input(validate)
    validate.add_argument("--json", action="store_true", help="print a JSON report")
    validate.set_defaults(run="validate")

    strategies = commands.add_parser(
        "strategies",
        help="list built-in and installed strategies with their parameters",
    )
    strategies.add_argument("--json", action="store_true", help="print a JSON report")
    strategies.set_defaults(run="strategies")

    proxy = commands.add_parser(
        "proxy",
        help="run the OpenAI/Anthropic-compatible compaction proxy",
        description="Serve POST /v1/chat/completions, /v1/messages and /v1/responses: every "
        "request gets the config's per-request transforms and, when it reaches the trigger, its "
        "strategy, then goes to the upstream set in [proxy] (or --openai-base-url, "
        "--anthropic-base-url). Other paths pass through; GET /metrics serves Prometheus "
        "metrics. Needs the 'proxy' extra.",
    )
    add_proxy_options(proxy)
    proxy.add_argument("--host", help="address to listen on (default: [proxy] host, 127.0.0.1)")
    proxy.add_argument("--port", type=int, help="port to listen on (default: [proxy] port, 8787)")
    proxy.set_defaults(run="proxy")

    wrap = commands.add_parser(
        "wrap",
        help="run an agent command through the proxy (ctxcompact wrap -- claude)",
        description="Start the proxy on a free loopback port, run COMMAND with OPENAI_BASE_URL, "
        "OPENAI_API_BASE, ANTHROPIC_BASE_URL and ANTHROPIC_API_BASE pointing at it, pass "
        "SIGINT/SIGTERM/SIGHUP on, print one summary line, and exit with COMMAND's exit code. "
        "Upstreams: the options, else the config's [proxy], else the OPENAI_BASE_URL and "
        "ANTHROPIC_BASE_URL COMMAND would have used.",
    )
    add_proxy_options(wrap)
    wrap.add_argument(
        "--log",
        metavar="FILE",
        help="append the proxy's per-request lines to FILE (default: only its warnings, on "
        "standard error)",
    )
    wrap.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    wrap.set_defaults(run="wrap")
    return parser


def _configure_logging(*, verbose: bool) -> None:
    # The controller logs each compaction as a warning for agents to see; a replay makes
    # hundreds of them, so they are shown only on request. Failures are reported anyway.
    logger = logging.getLogger("ctxcompact")
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    else:
        logger.setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    from ._commands import run_apply, run_replay, run_strategies, run_validate
    from ._proxy import run_proxy
    from ._wrap import run_wrap

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse reported
        return exc.code if isinstance(exc.code, int) else 2
    _configure_logging(verbose=getattr(args, "verbose", False))
    commands = {
        "apply": run_apply,
        "replay": run_replay,
        "validate": run_validate,
        "strategies": run_strategies,
        "proxy": run_proxy,
        "wrap": run_wrap,
    }
    try:
        return commands[args.run](args)
    except (CliError, CtxCompactError) as exc:
        sys.stderr.write(f"ctxcompact: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # The reader went away (`ctxcompact strategies | head`): not an error worth a trace.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("ctxcompact: interrupted\n")
        return 130
