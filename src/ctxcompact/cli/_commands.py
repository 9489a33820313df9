"""The four commands: ``apply``, ``replay``, ``validate``, ``strategies``.

Each takes the parsed arguments and returns the process exit code: 0 success, 1 the command
ran and found something wrong (invalid histories, a compaction that failed), 2 bad usage or
unreadable input.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._history.validate import check_history
from .._plugins.loader import list_strategies
from .._tokens.pricing import Pricing, provider
from ..exceptions import UnknownPricingError
from ..replay import FileReplay, ReplayStats, replay
from . import _params_for as params_for
from ._io import (
    CliError,
    Conversation,
    conversation_paths,
    load_demo,
    read_conversation,
    write_conversation,
)
from ._progress import FailureReport, call_progress
from ._report import (
    ReplaySettings,
    distinct_labels,
    dumps,
    plot_replays,
    replay_json,
    replay_text,
    require_matplotlib,
)
from ._setup import DEFAULT_STRATEGY, Setup, build_setup, parse_params

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Sequence

    from .._controller.controller import CompactionEvent
    from .._history.messages import Message

__all__ = ["run_apply", "run_replay", "run_strategies", "run_validate"]

_FAILED = ("failed", "rejected", "circuit_open")
T = TypeVar("T")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _inputs(paths: Sequence[str]) -> list[str]:
    """The conversation files named: folders opened, ``.meta.json`` sidecars left out (said)."""
    found, skipped = conversation_paths(paths)
    if skipped:
        _err(
            f"ctxcompact: left out {len(skipped)} .meta.json file(s) (they describe recorded "
            "conversations; they are not conversations)"
        )
    return found


def _read_all(paths: Sequence[str], fmt: Any) -> list[Conversation]:
    return [read_conversation(path, fmt=fmt) for path in paths]


async def _closing(work: Awaitable[T], setups: Sequence[Setup]) -> T:
    """Await ``work``, then close the summarizers the setups built (also on failure)."""
    try:
        return await work
    finally:
        for setup in setups:
            await setup.aclose()


def _raise_if_llm_missing(event: CompactionEvent | None) -> None:
    """A strategy that needs an LLM ran without one: stop, never report a fake result."""
    if event is None or event.problem is None:
        return
    if event.problem.exception_type == "LLMRequiredError":
        raise CliError(
            f"strategy {event.strategy} needs an LLM and none is configured: add a "
            f"[compaction.llm] table to a config file and pass --config FILE ({event.error})"
        )


# -- apply ---------------------------------------------------------------------------------


def _once(values: list[str] | None, flag: str) -> str | None:
    """The one value of a flag ``apply`` takes once (argparse appends every one given).

    Raises:
        CliError: The flag was given more than once.
    """
    if values and len(values) > 1:
        raise CliError(f"{flag} is given twice: this command takes one", flag=flag)
    return values[0] if values else None


def run_apply(args: argparse.Namespace) -> int:
    conversation = read_conversation(args.file, fmt=args.format)
    # No store: the file written outlives this process, so a marker naming a recall handle
    # would name one that no store holds once the command exits.
    setup = build_setup(
        args,
        spec=_once(args.strategy, "--strategy"),
        default_strategy=None,
        params=[v for _, v in args.param],
        store=False,
        config_file=_once(args.config, "--config"),
    )
    return asyncio.run(_closing(_apply(args, conversation, setup), [setup]))


async def _apply(args: argparse.Namespace, conversation: Conversation, setup: Setup) -> int:

    history = conversation.messages
    controller = setup.make_controller()
    step = await controller.step(history, force=True)
    event = step.event
    _raise_if_llm_missing(event)
    result = step.request
    report = _apply_report(conversation, setup, history, result, event)
    if args.output:
        write_conversation(conversation, result, args.output)
    # With "-o -" the conversation owns standard output; the report goes to standard error.
    emit = _err if args.output == "-" else _out
    if args.json:
        emit(dumps(report))
    else:
        emit(_apply_text(report))
    if event is not None and event.status in _FAILED:
        _err(f"ctxcompact: compaction {event.status}: {event.error}")
        return 1
    return 0


def _apply_report(
    conversation: Conversation,
    setup: Setup,
    before: Sequence[Message],
    after: Sequence[Message],
    event: CompactionEvent | None,
) -> dict[str, Any]:
    counter = setup.counter
    return {
        "schema": "ctxcompact.apply/1",
        "file": conversation.name,
        "format": conversation.format,
        "strategy": setup.label,
        "status": event.status if event is not None else "noop",
        "error": event.error if event is not None else None,
        "messages_before": len(before),
        "messages_after": len(after),
        "masked_tool_results": masked_tool_results(before, after),
        "tool_chars_before": _tool_chars(before),
        "tool_chars_after": _tool_chars(after),
        "tokens_before": counter.count(before),
        "tokens_after": counter.count(after),
    }


def masked_tool_results(before: Sequence[Message], after: Sequence[Message]) -> int:
    """Tool messages of ``after`` whose content differs from the same message in ``before``.

    Strategies reuse the messages they keep and never reorder, so a kept message is found by
    identity; a rewritten one is the next tool message of ``before`` with its
    ``tool_call_id`` after the last match. Dropped messages are skipped, not counted.
    """
    position = {id(m): i for i, m in enumerate(before)}
    masked = 0
    j = 0
    for message in after:
        kept = position.get(id(message))
        if kept is not None:
            j = kept + 1
            continue
        if message.role != "tool":
            continue
        while j < len(before) and not (
            before[j].role == "tool" and before[j].tool_call_id == message.tool_call_id
        ):
            j += 1
        if j == len(before):
            break
        masked += before[j].content != message.content
        j += 1
    return masked


def _tool_chars(history: Sequence[Message]) -> int:
    return sum(len(m.text) for m in history if m.role == "tool")


def _apply_text(report: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{report['file']} ({report['format']}) with {report['strategy']}: {report['status']}",
            f"  messages          {report['messages_before']:>10,} -> {report['messages_after']:,}",
            f"  masked tool results {report['masked_tool_results']:>8,}",
            f"  tool chars        {report['tool_chars_before']:>10,} -> "
            f"{report['tool_chars_after']:,}",
            f"  tokens            {report['tokens_before']:>10,} -> {report['tokens_after']:,}",
        ]
    )


# -- replay --------------------------------------------------------------------------------


def run_replay(args: argparse.Namespace) -> int:
    if not 0.0 <= args.cached_price <= 1.0:
        raise CliError(
            f"--cached-price must be between 0 and 1, got {args.cached_price}",
            flag="--cached-price",
        )
    if args.plot:
        if not args.plot.lower().endswith(".png"):
            raise CliError(
                f"--plot writes a PNG image: give a file name ending in .png, got {args.plot!r}",
                flag="--plot",
            )
        require_matplotlib()
    setups = _replay_setups(args)
    args.pricing_table = _pricing(args, setups)
    conversations = _read_all(_inputs(args.files), args.format) if args.files else [load_demo()]
    replays = asyncio.run(_closing(_replay_all(args, conversations, setups), setups))
    first = setups[0]
    given_params = [parse_params(params_for(args, k)) for k in range(len(setups))]
    # What the advice must not suggest again: the params each run had, and --reserved.
    flags = {"--reserved": args.reserved} if args.reserved is not None else {}
    settings = ReplaySettings(
        strategies=distinct_labels(_run_names(args, setups), given_params),
        max_context_size=first.max_context_size,
        reserved_context_size=first.reserved_context_size,
        cached_price=args.cached_price,
        token_counter=first.counter_name,
        pricing=args.pricing_table,
        recall=any(setup.wiring.recall for setup in setups),
        params=tuple({**setup.config.compaction.params, **flags} for setup in setups),
        trigger_at=_trigger(first),
    )
    if args.plot:
        plot_replays(settings, replays, args.plot)
    if args.json:
        _out(dumps(replay_json(settings, replays)))
    else:
        _out(replay_text(settings, replays))
        if args.plot:
            _out(f"\nplot written to {args.plot}")
    failed = sum(stats.failed_compactions for item in replays for stats in item.compacted)
    if failed:
        # The figures stand (a failed compaction keeps the history), but they do not show
        # what the strategy would do when it works: say so in the exit code.
        _err(f"ctxcompact: {failed} compaction attempt(s) failed; the history was kept each time")
        return 1
    return 0


async def _replay_all(
    args: argparse.Namespace, conversations: Sequence[Conversation], setups: Sequence[Setup]
) -> list[FileReplay]:
    from tqdm import tqdm

    replays: list[FileReplay] = []
    bar = tqdm(
        conversations,
        desc="replaying",
        unit="file",
        file=sys.stderr,
        # None: tqdm shows the bar only on a terminal, never in logs or pipes.
        disable=True if len(conversations) < 2 or args.no_progress else None,
        leave=False,
    )
    for conversation in bar:
        counter = setups[0].counter
        baseline = await replay(
            conversation.messages,
            None,
            counter=counter,
            cached_price=args.cached_price,
            window=(setups[0].max_context_size, setups[0].reserved_context_size),
            pricing=args.pricing_table,
        )
        counter.clear()
        runs: list[ReplayStats] = []
        for setup in setups:
            report = FailureReport(conversation.name, setup.label, bar.write)
            progress = call_progress(args, conversation, setup, many=len(conversations) > 1)
            try:
                runs.append(
                    await replay(
                        conversation.messages,
                        setup.make_controller(),
                        counter=setup.counter,
                        cached_price=args.cached_price,
                        llm=setup.llm,
                        pricing=args.pricing_table,
                        mode=args.mode,
                        on_failure=report,
                        on_call=progress,
                        referenced=True,
                    )
                )
            finally:
                setup.counter.clear()
                if progress is not None:
                    progress.close()
        replays.append(
            FileReplay(conversation.name, len(conversation.messages), baseline, tuple(runs))
        )
    bar.close()
    return replays


def _replay_setups(args: argparse.Namespace) -> list[Setup]:
    """One run per ``--strategy`` (on the one ``--config``, if any), or one per ``--config``
    when several are given: then every run must replay at the same window, reserve, trigger
    and token count (method and encoding), which the report states once, or the columns
    would not be comparable.

    Raises:
        CliError: Several ``--config`` with ``--strategy``, or configurations that differ in
            those settings (the message names the files).
    """
    files: list[str] = args.config or []
    if len(files) > 1 and args.strategy:
        raise CliError(
            "--strategy with several --config files: name the strategy in each file (or give "
            "one --config and several --strategy)",
            flag="--strategy",
        )
    # (strategy, config file) per run: each --strategy on the one file, or each file's own.
    runs = (
        [(None, path) for path in files]
        if len(files) > 1
        else [(spec, files[0] if files else None) for spec in args.strategy or [None]]
    )
    setups = [
        build_setup(
            args,
            spec=spec,
            default_strategy=DEFAULT_STRATEGY,
            params=params_for(args, k),
            config_file=path,
        )
        for k, (spec, path) in enumerate(runs)
    ]
    if len(files) <= 1:
        return setups
    # What the report states once for every run: the window, the trigger, how tokens are
    # counted (the baseline is counted once, with the first file's counter).
    shown = [
        f"window {setup.max_context_size:,}, reserved {setup.reserved_context_size:,}, "
        f"trigger at {_trigger(setup):,}, {_counting(setup)} tokens"
        for setup in setups
    ]
    if len(set(shown)) > 1:
        each = "; ".join(f"{path}: {text}" for path, text in zip(files, shown, strict=True))
        raise CliError(
            f"the --config files replay at different settings ({each}): the report compares "
            "runs at one window and one token count; set them alike (--max-context-size, "
            "--reserved and --token-counter apply to every file)",
            flag="--config",
        )
    return setups


def _trigger(setup: Setup) -> int:
    """The token count compaction starts at: the window minus the reserve, or lower where a
    ``trigger_ratio`` puts it (the controller's rule: ``tokens >= ratio x window``)."""
    threshold = setup.max_context_size - setup.reserved_context_size
    ratio = setup.config.compaction.trigger_ratio
    return threshold if ratio is None else min(threshold, math.ceil(ratio * setup.max_context_size))


def _counting(setup: Setup) -> str:
    """How a run counts tokens: the method, and tiktoken's encoding (the heuristic has none)."""
    encoding = setup.config.token_counting.encoding
    return f"tiktoken {encoding}" if setup.counter_name == "tiktoken" else "heuristic"


def _run_names(args: argparse.Namespace, setups: Sequence[Setup]) -> list[str]:
    """Each run's name for its column: its strategy, and its file when several ``--config``
    name the same strategy."""
    names = [setup.label for setup in setups]
    files: list[str] = args.config or []
    if len(files) <= 1:
        return names
    base = [Path(path).name for path in files]
    return [
        # The file's name, or the path as given when two files share a name.
        name if names.count(name) == 1 else f"{name} ({path if base.count(short) > 1 else short})"
        for name, path, short in zip(names, files, base, strict=True)
    ]


def _pricing(args: argparse.Namespace, setups: Sequence[Setup]) -> Pricing:
    """``--pricing NAME``: a built-in table or a ``[pricing.NAME]`` of a config file (with
    several, every file that defines the named table must define it alike; one file's
    table applies to every run, as the bill is one).

    Raises:
        CliError: An unknown name, or a named table two ``--config`` files define differently.
    """
    extra: dict[str, Pricing] = {}
    for setup in setups:
        for name, table in setup.config.pricing.items():
            pricing = Pricing(name, **table.model_dump())
            if extra.setdefault(name, pricing) != pricing and name == args.pricing:
                raise CliError(
                    f"--pricing {name}: the --config files define [pricing.{name}] differently",
                    flag="--pricing",
                )
    try:
        return provider(args.pricing, extra=extra, cached_price=args.cached_price)
    except UnknownPricingError as exc:
        raise CliError(f"--pricing: {exc.message}", flag="--pricing") from None


# -- validate ------------------------------------------------------------------------------


def run_validate(args: argparse.Namespace) -> int:

    files: list[dict[str, Any]] = []
    unreadable = 0
    for path in _inputs(args.files):
        try:
            conversation = read_conversation(path, fmt=args.format)
        except CliError as exc:
            unreadable += 1
            _err(f"ctxcompact: error: {exc}")
            files.append({"file": path, "error": str(exc), "valid": False, "problems": []})
            continue
        problems = check_history(conversation.messages)
        files.append(
            {
                "file": path,
                "error": None,
                "format": conversation.format,
                "messages": len(conversation.messages),
                "valid": not problems,
                "problems": [
                    {"index": p.index, "kind": p.kind, "message": p.message} for p in problems
                ],
            }
        )
        if not args.json:
            verdict = "ok" if not problems else f"{len(problems)} problem(s)"
            _out(f"{path}: {len(conversation.messages)} messages, {verdict}")
            for problem in problems:
                _out(f"  {problem}")
    if args.json:
        valid = all(item["valid"] for item in files)
        _out(dumps({"schema": "ctxcompact.validate/1", "valid": valid, "files": files}))
    if unreadable:
        return 2
    return 0 if all(item["valid"] for item in files) else 1


# -- strategies ----------------------------------------------------------------------------


def run_strategies(args: argparse.Namespace) -> int:

    infos = list_strategies()
    if args.json:
        document = {
            "schema": "ctxcompact.strategies/1",
            "strategies": [
                {
                    "name": info.name,
                    "target": info.target,
                    "summary": info.summary,
                    "error": info.error,
                    "dependencies": [_param_json(p) for p in info.dependencies],
                    "params": [_param_json(p) for p in info.params],
                }
                for info in infos
            ],
        }
        _out(dumps(document))
        return 0
    for info in infos:
        _out(f"{info.name}  ({info.target})")
        if info.summary:
            _out(f"    {info.summary}")
        if info.error:
            _out(f"    cannot be loaded: {info.error}")
        for dep in info.dependencies:
            _out(f"    [injected] {dep.name}: {dep.annotation}")
        for param in info.params:
            default = "required" if param.required else f"= {_short(repr(param.default))}"
            _out(f"    {param.name}: {param.annotation} {default}")
        _out("")
    return 0


def _short(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _param_json(param: Any) -> dict[str, Any]:
    import json

    default = param.default
    if not param.required:
        try:
            json.dumps(default)
        except (TypeError, ValueError):
            default = repr(default)
    return {
        "name": param.name,
        "annotation": param.annotation,
        "required": param.required,
        "default": None if param.required else default,
    }
