"""Every default and range that more than one module needs, in one place.

The controller, the agent, the config tables and the CLI read these; none restates them.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BREAKER_COOLDOWN",
    "DEFAULT_BREAKER_FAILURES",
    "DEFAULT_MAX_CONTEXT_SIZE",
    "DEFAULT_MAX_FAILURES",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MIN_PROGRESS",
    "DEFAULT_PRECOMPUTE_RATIO",
    "DEFAULT_RESERVED_CONTEXT_SIZE",
    "MAX_RECALL_ROUNDS",
    "REPLAY_MAX_CONTEXT_SIZE",
    "REPLAY_RESERVED_CONTEXT_SIZE",
    "TRIGGER_RATIO_RANGE",
]

DEFAULT_MAX_CONTEXT_SIZE = 128_000
"""The agent's window when none is given (a common size for current models)."""

DEFAULT_RESERVED_CONTEXT_SIZE = 50_000
"""Tokens kept free for the answer and the next tool results (KLIP-13's default)."""

TRIGGER_RATIO_RANGE = (0.5, 0.99)
"""Allowed values of ``trigger_ratio`` (inclusive), in the controller and in ``[compaction]``."""

DEFAULT_MIN_PROGRESS = 0.1
"""A run that saves less than this fraction waits for the history to grow by it."""

DEFAULT_MAX_FAILURES = 3
"""Consecutive failed runs that open the controller's circuit."""

# The earliest point of a summary made ahead: the controller starts it once the next call may
# reach the trigger (the history plus the most one call has added so far), so the summarizer
# gets that call's time to write it, and a conversation that ends below its trigger pays for no
# summary (one started at 80% of the trigger on a conversation that ended at 84% cost 145% of not
# compacting). The floor keeps a conversation whose largest call was huge (a whole file read)
# from summarizing at a fraction of its window; what it adds before the trigger, at most a fifth
# of it, stays verbatim after the summary.
DEFAULT_PRECOMPUTE_RATIO = 0.8
"""Fraction of the trigger below which no summary is started in the background
(``[compaction] precompute_ratio``; ``0`` or ``None``: never ahead of time)."""

# One failed call already means 1 + max_retries attempts, each waiting up to the timeout
# (3 minutes with [compaction.llm]'s defaults): paying that again on the next request buys
# nothing, since the cheaper tiers (hiding, the LLM-free pipeline steps) still run meanwhile.
DEFAULT_BREAKER_FAILURES = 1
"""Consecutive failed summarizer calls (each after the SDK's own retries) that open its
circuit breaker (:class:`ctxcompact.llm.CircuitBreakerLLM`)."""

# Short enough that a restarted local model server is used again within half a minute; long
# enough that during an outage at most one call per cool-down (the probe) waits.
DEFAULT_BREAKER_COOLDOWN = 30.0
"""Seconds an open summarizer breaker refuses calls before it lets one probe through."""

DEFAULT_MAX_STEPS = 50
"""Model calls one :meth:`ctxcompact.Agent.run` may make."""

# Small on purpose: replays exist to show compaction happening. Compaction fires at 12,000
# tokens, which the demo (about 18,000 tokens at its end) and 13 of the 17 public traces pass.
REPLAY_MAX_CONTEXT_SIZE = 16_000
"""The window ``ctxcompact replay`` uses when neither a flag nor a config sets one."""

REPLAY_RESERVED_CONTEXT_SIZE = 4_000
"""The reserve ``ctxcompact replay`` uses with its default window."""

# A recall window is at most 200 lines or 20,000 characters (about 5,000 tokens). On the 17
# public traces 93% of the 1,065 tool results come back in one window and the longest in 4, so
# 8 rounds let a model read any of them whole and more besides, while adding at most about
# 40,000 tokens to one request; each round is one more upstream call.
MAX_RECALL_ROUNDS = 8
"""Recall rounds the proxy answers per client request (``[proxy] max_recall_rounds``); one
closing round follows, telling the model the budget is spent."""
