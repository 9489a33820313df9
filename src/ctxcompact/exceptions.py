"""Every error ctxcompact raises, in one tree.

Mistakes a developer makes (a bad config file, an unknown strategy, a strategy that needs an
LLM it was not given) are :class:`UserError`; malformed conversation data is
:class:`FormatError`; failures at run time (a summarizer that returns garbage, a provider
that rate-limits) are :class:`CompactionError` and :class:`LLMError`.

Each error carries what a program needs as attributes (the file and key, the spec and the valid
choices, the status code); the message is for people. A mistake the standard library would
report as ``ValueError``, ``TypeError`` or ``KeyError`` is also an instance of that builtin, so
``except ValueError`` written before these classes existed still catches it.

What goes wrong while a run carries on (a strategy that raised, a store that failed) is not
raised: it is reported as a :class:`~ctxcompact.Problem` on the event or the result.

```
CtxCompactError
├── UserError                    the developer's mistake: fix the code or the config
│   ├── ConfigError              invalid TOML, unknown key, value out of range (path, key)
│   ├── StrategyLoadError        a strategy spec that cannot be loaded (spec, reason, choices)
│   ├── MissingDependencyError   an optional extra is not installed (extra; ImportError too)
│   ├── LLMRequiredError         a strategy needs an LLM and none was given
│   ├── ArgumentError            a call's argument is out of range or clashes (argument;
│   │   │                        ValueError too)
│   │   └── PricingError         a price table with an impossible value (table, argument)
│   ├── MissingArgumentError     an argument another one needs is missing (argument,
│   │                            needed_by; TypeError too)
│   ├── UnknownPricingError      no price table of that name (name, choices; KeyError too)
│   └── CliError                 a command-line mistake: a bad flag, a file that cannot be
│                                read or written (path, flag); the command exits 2
├── FormatError (ValueError)     malformed messages (message index, field)
│   └── ConversationFileError    a conversation file that cannot be read (file, line, column)
├── CompactionError              a strategy failed at run time; the history is kept
│   ├── ContextBudgetError       what must be kept does not fit the budget (budget, required)
│   ├── NotSmallerError          a rewrite that would not shrink the context (tokens_before,
│   │   │                        tokens_after): a tiered strategy moves on to its next tier
│   │   └── SummaryNotSmallerError  a summary costing at least what it replaces (also a
│   │                            SummaryRejectedError, reason "not_smaller")
│   └── SummaryRejectedError     a summary that is empty, garbage or not smaller (reason)
├── MaxStepsExceeded             an agent run used its whole step budget (steps)
├── StoreError                   an originals store failed (path); compaction stands
└── LLMError                     a model call failed (status_code, retryable)
    ├── RateLimitError           429                                    retryable
    ├── ContextTooLongError      the request does not fit the model's window
    ├── AuthenticationError      401/403, a bad or missing API key
    ├── ModelNotFoundError       404, unknown model
    ├── LLMTimeoutError          the request timed out                  retryable
    ├── ServerError              5xx                                    retryable
    ├── LLMConnectionError       the server could not be reached        retryable
    ├── LLMUnavailableError      refused unsent: the endpoint's circuit breaker is open
    └── BadResponseError         an empty or malformed completion
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ArgumentError",
    "AuthenticationError",
    "BadResponseError",
    "CliError",
    "CompactionError",
    "ConfigError",
    "ContextBudgetError",
    "ContextTooLongError",
    "ConversationFileError",
    "CtxCompactError",
    "FormatError",
    "LLMConnectionError",
    "LLMError",
    "LLMRequiredError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "MaxStepsExceeded",
    "MissingArgumentError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "NotSmallerError",
    "PricingError",
    "RateLimitError",
    "ServerError",
    "StoreError",
    "StrategyLoadError",
    "StrategyLoadReason",
    "SummaryNotSmallerError",
    "SummaryRejectedError",
    "UnknownPricingError",
    "UserError",
]


class CtxCompactError(Exception):
    """Base class of every error raised by ctxcompact."""


class UserError(CtxCompactError):
    """A mistake in how ctxcompact is used: the message says what to change."""


class ConfigError(UserError):
    """An invalid configuration file or value.

    Attributes:
        message: What is wrong and how to fix it, without the file and key.
        path: The file the error is in, when it came from a file.
        key: The dotted key (``compaction.reserved_context_size``), when one is at fault.
    """

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        where = ", ".join(p for p in (path, f"key {key!r}" if key else None) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.message = message
        self.path = path
        self.key = key

    def located(self, *, path: str | None = None, table: str | None = None) -> ConfigError:
        """The same error placed in a file and a table: ``key`` becomes ``table.key``.

        Context is attached as fields, never parsed back out of the text (httpx's
        ``request_context`` habit). A path already set is kept.

        Example:
            >>> ConfigError("must be > 0", key="max_chars").located(table="truncation").key
            'truncation.max_chars'
        """
        key = ".".join(k for k in (table, self.key) if k) or None
        located = ConfigError(self.message, path=self.path or path, key=key)
        located.__cause__ = self
        return located


StrategyLoadReason = Literal[
    "malformed_spec",
    "unknown_name",
    "ambiguous_name",
    "module_not_found",
    "import_failed",
    "no_attribute",
    "not_a_class",
    "not_a_strategy",
    "missing_dependency",
    "bad_params",
    "bad_signature",
    "constructor_raised",
]
"""Why a strategy spec could not be loaded, one fixed word each."""


class StrategyLoadError(UserError):
    """A strategy spec could not be turned into a working strategy object.

    Attributes:
        spec: The spec as given (``package.module:ClassName`` or an entry-point name).
        reason: Why, one fixed word (:data:`StrategyLoadReason`): ``unknown_name``,
            ``module_not_found``, ``bad_params``...
        detail: What went wrong, in words (the message without the spec).
        choices: What would have been valid, when known: the registered names for an
            unknown name, the close names or the strategy classes of a module for a missing
            attribute, the accepted params for a bad one.

    Example:
        >>> e = StrategyLoadError("hidng", "no strategy named 'hidng'", reason="unknown_name",
        ...                       choices=("hiding", "tool-result-hiding"))
        >>> str(e), e.reason, e.choices[0]
        ("cannot load strategy 'hidng': no strategy named 'hidng'", 'unknown_name', 'hiding')
    """

    def __init__(
        self,
        spec: str,
        message: str,
        *,
        reason: StrategyLoadReason,
        choices: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"cannot load strategy {spec!r}: {message}")
        self.spec = spec
        self.reason = reason
        self.detail = message
        self.choices = choices


class MissingDependencyError(UserError, ImportError):
    """An optional dependency is not installed.

    Attributes:
        extra: The ctxcompact extra that provides it (``openai``, ``tiktoken``...).
    """

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(
            f"{what} needs the optional dependency '{extra}': pip install 'ctxcompact[{extra}]'"
        )
        self.extra = extra


class LLMRequiredError(UserError):
    """A strategy that summarizes with an LLM was run without one."""


class ArgumentError(UserError, ValueError):
    """A function or constructor was called with a value it cannot take, or with arguments
    that cannot go together. Also a :class:`ValueError`.

    Attributes:
        argument: The parameter at fault, as the call names it (``failure_threshold``,
            ``client``).
        message: What is wrong and how to fix it (the error's text).

    Example:
        >>> ArgumentError("cooldown", "cooldown must be > 0 seconds, got 0").argument
        'cooldown'
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument
        self.message = message


class PricingError(ArgumentError):
    """A price table (:class:`~ctxcompact.replay.Pricing`) with an impossible value.

    Attributes:
        table: The table's name.
        argument: The field at fault (``read``, ``write``, ``ttl_seconds``, ``min_tokens``).
    """

    def __init__(self, table: str, argument: str, message: str) -> None:
        super().__init__(argument, message)
        self.table = table


class MissingArgumentError(UserError, TypeError):
    """An argument that another one needs was not given. Also a :class:`TypeError` (what
    Python raises for a missing argument).

    Attributes:
        argument: The missing parameter (``unit_tokens``).
        needed_by: The parameter that needs it (``clear_at_least``).
    """

    def __init__(self, argument: str, message: str, *, needed_by: str) -> None:
        super().__init__(message)
        self.argument = argument
        self.needed_by = needed_by


class UnknownPricingError(UserError, KeyError):
    """No price table of that name. Also a :class:`KeyError` (a lookup by name).

    Attributes:
        name: The name asked for.
        choices: The tables that exist, sorted.

    Example:
        >>> str(UnknownPricingError("x", ("flat", "openai")))
        "unknown pricing 'x'; choose one of flat, openai"
    """

    def __init__(self, name: str, choices: tuple[str, ...]) -> None:
        self.message = f"unknown pricing {name!r}; choose one of {', '.join(choices)}"
        super().__init__(self.message)
        self.name = name
        self.choices = choices

    def __str__(self) -> str:  # KeyError's own would quote the whole message
        return self.message


class CliError(UserError):
    """A mistake on the command line: a bad flag, a file that cannot be read or written.
    The command prints the message on one line and exits 2.

    Attributes:
        path: The file at fault, when one is.
        flag: The flag at fault (``--pricing``), when one is.
    """

    def __init__(self, message: str, *, path: str | None = None, flag: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.flag = flag


class FormatError(CtxCompactError, ValueError):
    """Malformed conversation data.

    Attributes:
        index: The index of the offending message, when the error is about one message.
        field: The offending field (``tool_calls[0].function.arguments``), when known.
    """

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        where = ""
        if index is not None:
            where = f"message {index}"
            if field:
                where += f", field {field!r}"
        elif field:
            where = f"field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)
        self.index = index
        self.field = field
        self.detail = message


class ConversationFileError(FormatError):
    """A conversation file that cannot be read as a conversation.

    The message starts with the file, then where in it: ``line L, column C`` for a JSON
    syntax error, ``line L`` for a JSON Lines record, ``message N`` (and the field) for a
    malformed message of a JSON list.

    Attributes:
        path: The file, as given.
        line: The 1-based line at fault, when known.
        column: The 1-based column of a JSON syntax error, when known.

    Example:
        >>> str(ConversationFileError("invalid JSON: Expecting value", path="a.json", line=3,
        ...                           column=7))
        'a.json: line 3, column 7: invalid JSON: Expecting value'
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        line: int | None = None,
        column: int | None = None,
        index: int | None = None,
        field: str | None = None,
    ) -> None:
        where = [path]
        if line is not None:
            where.append(f"line {line}" + (f", column {column}" if column is not None else ""))
        if index is not None:
            where.append(f"message {index}" + (f", field {field!r}" if field else ""))
        elif field:
            where.append(f"field {field!r}")
        CtxCompactError.__init__(self, ": ".join([*where, message]))
        self.index = index
        self.field = field
        self.detail = message
        self.path = path
        self.line = line
        self.column = column


class CompactionError(CtxCompactError):
    """A strategy failed at run time. The controller keeps the history unchanged."""


class ContextBudgetError(CompactionError):
    """What a trimming strategy must keep does not fit its token budget.

    The message names each part and its tokens (never message content), e.g. the system
    messages, the task (the last user message) and the newest assistant message.

    Attributes:
        budget: The tokens the history may use.
        required: Tokens of each part that must be kept, by name, in history order.
    """

    def __init__(self, budget: int, required: Mapping[str, int]) -> None:
        parts = " + ".join(f"{name} {tokens}" for name, tokens in required.items())
        need = sum(required.values())
        super().__init__(
            f"a budget of {budget} tokens cannot hold what must be kept: {parts} = {need} "
            "tokens; raise the context window, lower the reserve or shorten these messages"
        )
        self.budget = budget
        self.required = dict(required)


class SummaryRejectedError(CompactionError):
    """A summarizer's answer was refused; the history is kept as it was.

    Attributes:
        reason: A fixed word for why: ``empty``, ``not_text``, ``no_letters``, ``garbage``,
            ``too_long`` or ``not_smaller``. The message adds sizes, never the summary text.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotSmallerError(CompactionError):
    """A rewrite that would not make the context smaller; it must not replace the history.

    Every compaction must shrink what it rewrites: one that does not would leave the history
    as large as before and fire again at once. A strategy raises this instead of returning
    such a rewrite, so a tiered strategy can move on to its next tier (the controller, when it
    gets one, keeps the history and waits for it to grow before trying again).

    Attributes:
        tokens_before: Tokens of what the rewrite would replace.
        tokens_after: Tokens of what would stand in its place.
    """

    def __init__(self, message: str, *, tokens_before: int, tokens_after: int) -> None:
        super().__init__(message)
        self.tokens_before = tokens_before
        self.tokens_after = tokens_after


class SummaryNotSmallerError(SummaryRejectedError, NotSmallerError):
    """A summary message that costs at least what it replaces (``reason`` ``not_smaller``):
    both a refused summary and a rewrite that would not shrink the context."""

    def __init__(self, message: str, *, tokens_before: int, tokens_after: int) -> None:
        CompactionError.__init__(self, message)
        self.reason = "not_smaller"
        self.tokens_before = tokens_before
        self.tokens_after = tokens_after


class MaxStepsExceeded(CtxCompactError):
    """An agent run made ``max_steps`` model calls and the model was still calling tools.

    The agent's history and transcript are complete; running it again continues.

    Attributes:
        steps: The number of model calls made.
    """

    def __init__(self, message: str, *, steps: int) -> None:
        super().__init__(message)
        self.steps = steps


class StoreError(CtxCompactError):
    """An originals store could not keep or read a record (a locked or corrupt file, a
    record larger than the store's bound, a third-party store's own failure).

    Callers report it and carry on: a compaction stands even when its originals could not be
    stored.

    Attributes:
        path: The store's file, for a file-backed store.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class LLMError(CtxCompactError):
    """A model call failed.

    Attributes:
        status_code: The HTTP status code, when the provider answered.
        retryable: Whether trying the same request again may succeed.
    """

    retryable: bool = False

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class RateLimitError(LLMError):
    """The provider rate-limited the request (429)."""

    retryable = True


class ContextTooLongError(LLMError):
    """The request is longer than the model's context window."""


class AuthenticationError(LLMError):
    """The API key is missing, invalid or not allowed to use the model (401, 403)."""


class ModelNotFoundError(LLMError):
    """The model does not exist or is not available (404)."""


class LLMTimeoutError(LLMError):
    """The request timed out."""

    retryable = True


class ServerError(LLMError):
    """The provider failed (5xx)."""

    retryable = True


class LLMConnectionError(LLMError):
    """The provider could not be reached."""

    retryable = True


class LLMUnavailableError(LLMError):
    """The call was refused without being sent: the endpoint's circuit breaker is open.

    :class:`~ctxcompact.llm.CircuitBreakerLLM` raises it at once, instead of waiting for the
    timeout and the retries again, while an endpoint that just failed cools down. Not
    retryable now; ``retry_in_s`` says when the breaker lets one probe call through.

    Attributes:
        retry_in_s: Seconds until the breaker lets a probe call through (0 while a probe is
            already in flight).
        failures: The consecutive failed calls that opened the breaker.
    """

    def __init__(self, message: str, *, retry_in_s: float, failures: int) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s
        self.failures = failures


class BadResponseError(LLMError):
    """The provider answered with an empty or malformed completion."""
