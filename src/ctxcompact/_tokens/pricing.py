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

from ..exceptions import ArgumentError, PricingError, UnknownPricingError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from .counters import TokenCounter

__all__ = [
    "PRICING",
    "REWRITE_PRICING",
    "CacheMeter",
    "CallCost",
    "Pricing",
    "message_time",
    "provider",
]


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
            raise PricingError(
                self.name, "read", f"pricing {self.name!r}: read must be in [0, 1], got {self.read}"
            )
        if self.write < 1.0:
            raise PricingError(
                self.name, "write", f"pricing {self.name!r}: write must be >= 1, got {self.write}"
            )
        if self.ttl_seconds is not None and self.ttl_seconds <= 0:
            raise PricingError(
                self.name,
                "ttl_seconds",
                f"pricing {self.name!r}: ttl_seconds must be > 0, got {self.ttl_seconds}",
            )
        if self.min_tokens < 0:
            raise PricingError(
                self.name, "min_tokens", f"pricing {self.name!r}: min_tokens must be >= 0"
            )

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


REWRITE_PRICING = Pricing("rewrite", read=0.1, write=1.25)
"""The prices the controller weighs an optional rewrite at unless ``[compaction]
cache_pricing`` names others: the dearest common cache (Anthropic's write premium, reads at a
tenth), so a rewrite that pays back here pays back at OpenAI's prices and the flat model's."""


def provider(
    name: str, *, extra: Mapping[str, Pricing] | None = None, cached_price: float | None = None
) -> Pricing:
    """The price table ``name``, from ``extra`` (TOML's ``[pricing.*]``) or the built-ins.

    ``cached_price`` overrides the read price of ``flat`` only (the CLI's
    ``--cached-price``).

    Raises:
        UnknownPricingError: No table of that name (a ``KeyError`` too); ``choices`` are the
            valid ones.
    """
    tables = {**PRICING, **(extra or {})}
    if name not in tables:
        raise UnknownPricingError(name, tuple(sorted(tables)))
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


@dataclass(frozen=True, slots=True)
class CallCost:
    """How one model call is billed.

    Attributes:
        input_tokens: Tokens of the whole input.
        cached_tokens: Tokens of the prefix shared with the previous call's input.
        cost: ``cached_tokens * cached_price + (input_tokens - cached_tokens)``.
        cache_break: The shared prefix is shorter than the previous input: something the
            provider had cached was changed or removed.
        cache_write_tokens: Tokens billed as written to the cache (the uncached part).
        expired: The previous call was longer ago than the pricing's TTL: nothing was read
            from the cache, whatever the prefix shared.

    Example:
        >>> CallCost(input_tokens=100, cached_tokens=80, cost=28.0, cache_break=False).cost
        28.0
    """

    input_tokens: int
    cached_tokens: int
    cost: float
    cache_break: bool
    cache_write_tokens: int = 0
    expired: bool = False


class CacheMeter:
    """Bills a sequence of model inputs the way a provider's prompt cache does.

    The shared prefix is measured in whole messages (a message counts as cached only if it and
    every message before it are equal to the previous input's), then converted to tokens.
    Without ``pricing`` it costs ``cached_price`` a token and the rest 1 (the ``flat``
    model); with it, the provider's read and write prices, minimum prefix and TTL apply
    (the TTL only when :meth:`bill` is told when each call was made).

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, Message
        >>> meter = CacheMeter(HeuristicTokenCounter(), cached_price=0.1)
        >>> a, b = Message.user("question"), Message.assistant("answer")
        >>> first, second = meter.bill([a]), meter.bill([a, b])
        >>> second.cached_tokens == first.input_tokens, second.cache_break
        (True, False)
    """

    def __init__(
        self, counter: TokenCounter, *, cached_price: float = 0.1, pricing: Pricing | None = None
    ) -> None:
        if not 0.0 <= cached_price <= 1.0:
            raise ArgumentError(
                "cached_price", f"cached_price must be between 0 and 1, got {cached_price}"
            )
        self.counter = counter
        self.pricing = pricing if pricing is not None else Pricing("flat", read=cached_price)
        self.cached_price = self.pricing.read
        self._previous: list[Message] | None = None
        self._previous_at: float | None = None

    def bill(self, request: Sequence[Message], *, at: float | None = None) -> CallCost:
        """Bill one call whose input is ``request``, made at time ``at`` (seconds; ``None``:
        unknown, the cache is assumed warm), and remember it for the next call."""
        pricing = self.pricing
        ttl = pricing.ttl_seconds
        expired = (
            ttl is not None
            and at is not None
            and self._previous_at is not None
            and at - self._previous_at > ttl
        )
        if at is not None:
            self._previous_at = at
        previous = self._previous
        shared = 0
        if previous is not None:
            limit = min(len(previous), len(request))
            while shared < limit and (
                previous[shared] is request[shared] or previous[shared] == request[shared]
            ):
                shared += 1
        total = self.counter.count(request)
        cached = min(total, sum(self.counter.count_message(m) for m in request[:shared]))
        if expired or cached < pricing.min_tokens:
            cached = 0
        self._previous = list(request)
        return CallCost(
            input_tokens=total,
            cached_tokens=cached,
            cost=pricing.cost(total, cached),
            cache_break=previous is not None and shared < len(previous),
            cache_write_tokens=total - cached,
            expired=expired,
        )
