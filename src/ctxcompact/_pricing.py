"""How providers bill a prompt cache: the price table replay uses, extendable from TOML.

Prices are relative to the model's uncached input price (1.0), so one table serves every
model of a family. Each figure is the provider's published rate (sources below, read
2026-11); a ``[pricing.<name>]`` TOML table adds or replaces an entry (``read``, ``write``,
``ttl_seconds``, ``min_tokens``).

| name | read | write | ttl_seconds | min_tokens | source |
|---|---|---|---|---|---|
| flat | 0.1 (``--cached-price``) | 1.0 | none | 0 | ctxcompact's model: no premium, no expiry |
| anthropic | 0.1 | 1.25 | 300 | 1024 | [A]: 5-minute cache writes 1.25x, reads 0.1x |
| anthropic-1h | 0.1 | 2.0 | 3600 | 1024 | [A]: 1-hour cache writes 2x, reads 0.1x |
| openai | 0.1 | 1.0 | 300 | 1024 | [O2]: gpt-5 family, cached input $0.125 vs $1.25 |
| openai-gpt-4.1 | 0.25 | 1.0 | 300 | 1024 | [O2]: gpt-4.1 family, cached input $0.50 vs $2.00 |
| openai-gpt-4o | 0.5 | 1.0 | 300 | 1024 | [O1]: gpt-4o family, cached input $1.25 vs $2.50 |

[A] https://platform.claude.com/en/docs/build-with-claude/prompt-caching (pricing section:
"5-minute cache write tokens are 1.25 times the base input tokens price, 1-hour cache write
tokens are 2 times, cache read tokens are 0.1 times"; minimum cacheable prompt 1024 tokens on
Sonnet and Opus, 2048 on Haiku; "the cache has a 5-minute lifetime, refreshed each time the
cached content is used").
[O1] https://openai.com/index/api-prompt-caching/ (gpt-4o $2.50 uncached, $1.25 cached;
automatic on prompts longer than 1,024 tokens; "caches are typically cleared after 5-10
minutes of inactivity and are always removed within one hour of the cache's last use"; no
charge for writing).
[O2] https://openai.com/api/pricing/ (cached input at 10% of input for the gpt-5 family, 25%
for gpt-4.1).

OpenAI's TTL is given as the low end of its 5-10 minutes: a replay should not count on a
cache the provider may already have dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._messages import Message

__all__ = ["PRICING", "Pricing", "message_time", "provider"]


@dataclass(frozen=True, slots=True)
class Pricing:
    """How one provider bills the prompt cache, relative to its uncached input price.

    Attributes:
        name: The table's name (``--pricing NAME``).
        read: Price of a cached input token (a cache hit).
        write: Price of an uncached input token, which the provider writes to the cache
            (Anthropic bills the write above the input price; OpenAI does not).
        ttl_seconds: How long an unused cache lives; calls further apart read no cache.
            ``None``: forever (the flat model).
        min_tokens: A shared prefix shorter than this is not cached at all.

    Example:
        >>> PRICING["anthropic"].write, PRICING["anthropic"].ttl_seconds
        (1.25, 300.0)
    """

    name: str
    read: float
    write: float = 1.0
    ttl_seconds: float | None = None
    min_tokens: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.read <= 1.0:
            raise ValueError(f"pricing {self.name!r}: read must be in [0, 1], got {self.read}")
        if self.write < 1.0:
            raise ValueError(f"pricing {self.name!r}: write must be >= 1, got {self.write}")
        if self.ttl_seconds is not None and self.ttl_seconds <= 0:
            raise ValueError(
                f"pricing {self.name!r}: ttl_seconds must be > 0, got {self.ttl_seconds}"
            )
        if self.min_tokens < 0:
            raise ValueError(f"pricing {self.name!r}: min_tokens must be >= 0")

    def cost(self, input_tokens: int, cached_tokens: int) -> float:
        """What a call costs: cached tokens at ``read``, the rest at ``write``."""
        return cached_tokens * self.read + (input_tokens - cached_tokens) * self.write


PRICING: Mapping[str, Pricing] = {
    p.name: p
    for p in (
        Pricing("flat", read=0.1),
        Pricing("anthropic", read=0.1, write=1.25, ttl_seconds=300.0, min_tokens=1024),
        Pricing("anthropic-1h", read=0.1, write=2.0, ttl_seconds=3600.0, min_tokens=1024),
        Pricing("openai", read=0.1, ttl_seconds=300.0, min_tokens=1024),
        Pricing("openai-gpt-4.1", read=0.25, ttl_seconds=300.0, min_tokens=1024),
        Pricing("openai-gpt-4o", read=0.5, ttl_seconds=300.0, min_tokens=1024),
    )
}
"""The built-in price tables, by name (see the module docstring for their sources)."""


def provider(
    name: str, *, extra: Mapping[str, Pricing] | None = None, cached_price: float | None = None
) -> Pricing:
    """The price table ``name``, from ``extra`` (TOML's ``[pricing.*]``) or the built-ins.

    ``cached_price`` overrides the read price of ``flat`` only (the CLI's
    ``--cached-price``).

    Raises:
        KeyError: No table of that name; the message lists the valid ones.
    """
    tables = {**PRICING, **(extra or {})}
    if name not in tables:
        raise KeyError(f"unknown pricing {name!r}; choose one of {', '.join(sorted(tables))}")
    table = tables[name]
    if name == "flat" and cached_price is not None:
        return Pricing("flat", read=cached_price, write=table.write)
    return table


def message_time(message: Message) -> float | None:
    """When ``message`` was recorded, in seconds since the epoch, if the trace says so.

    Read from a ``timestamp`` extra key (an OpenAI-format trace) or the Anthropic layout's
    message keys: epoch seconds (or milliseconds), or an ISO 8601 string (``...Z`` allowed).
    ``None`` when absent or unreadable: the replay then assumes calls close together.
    """
    extra = message.model_extra or {}
    value = extra.get("timestamp")
    if value is None:
        layout = extra.get("anthropic")
        if isinstance(layout, Mapping):
            inner = layout.get("message")
            if isinstance(inner, Mapping):
                value = inner.get("timestamp")
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
