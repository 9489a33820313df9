"""The per-request transforms a config turns on, as strategy objects, in their order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .exceptions import ConfigError

if TYPE_CHECKING:
    from ._config import Config
    from ._contract import CompactionStrategy

__all__ = ["transforms_from_config"]


def transforms_from_config(config: Config, max_context_size: int) -> list[CompactionStrategy]:
    """Schema 1 masking, truncation and the context guard, each when its table enables it.

    Raises:
        ConfigError: A table's settings do not fit (named as ``table.key`` with the file).
    """
    from .strategies._guard import ContextGuard
    from .strategies._schema1 import Schema1Masking
    from .strategies._truncation import ToolResultTruncation

    transforms: list[CompactionStrategy] = []
    where = str(config.path) if config.path else None
    truncation = config.tool_result_truncation
    schema1 = config.observation_masking.schema1
    guard = config.context_guard
    try:
        # Masking first, so a masked result's placeholder gives its original size; then
        # truncation of what is still there in full; then the guard (below).
        if schema1.enabled:
            table = "observation_masking.schema1"
            transforms.append(Schema1Masking(**schema1.model_dump(exclude={"enabled"})))
        if truncation.enabled:
            table = "tool_result_truncation"
            transforms.append(
                ToolResultTruncation(
                    max_chars=truncation.max_chars,
                    head_chars=truncation.head_chars,
                    tail_chars=truncation.tail_chars,
                )
            )
        if guard.enabled:
            # Last: it only drops what still does not fit after masking and truncation. The
            # window is explicit, so only reserve_tokens is kept free (not the controller's
            # reserved_context_size, which is about when to compact, not what fits).
            table = "context_guard"
            params = guard.model_dump(exclude={"enabled"})
            transforms.append(ContextGuard(context_window=max_context_size, **params))
    except ConfigError as exc:
        # The strategy names its own parameter; say which table of the file it is in.
        message = str(exc).split(": ", 1)[-1] if exc.key else str(exc)
        key = f"{table}.{exc.key}" if exc.key else table
        raise ConfigError(message, path=where, key=key) from exc
    return transforms
