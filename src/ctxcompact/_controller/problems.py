"""What went wrong at run time, as fields: a :class:`Problem` travels on events and reports.

A strategy that raises, an output the controller refuses, a store that cannot keep the
originals, a request body the proxy cannot read: none of them stops the run, and each is
reported. The report is a :class:`Problem` with fixed fields (a closed ``kind``, the name of
the strategy, transform or store at fault, the exception's type name, a count) and two texts:

* :attr:`Problem.shown`, built from the fields alone, is what headers and log lines above
  DEBUG say: no exception message and no message content can reach it;
* :attr:`Problem.detail` is the free text (an exception's own message, which a third-party
  strategy may have built from the conversation): logged at DEBUG only.

:attr:`Problem.message` is the sentence the string accessors return
(:attr:`CompactionEvent.error <ctxcompact.CompactionEvent.error>`,
:attr:`PreparedRequest.skipped <ctxcompact.PreparedRequest.skipped>`...), as they did when
problems were strings: ctxcompact's own error messages in full, a third-party exception by
its type name only. Nothing parses any of these texts back: whoever needs to decide reads the
fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..exceptions import CtxCompactError

__all__ = ["Problem", "ProblemKind", "describe_error", "shown_name"]

ProblemKind = Literal[
    "strategy_raised",
    "output_rejected",
    "circuit_open",
    "waiting",
    "too_little_saved",
    "no_payback",
    "not_smaller",
    "transform_raised",
    "transform_rejected",
    "store_failed",
    "store_evicted",
    "pin_restored",
    "cannot_encode",
    "unreadable_messages",
    "no_messages",
    "string_input",
    "no_input",
    "unknown_window",
    "window_too_small",
    "proxy_rewriting_raised",
    "proxy_encoding_raised",
]
"""Every kind of run-time problem, closed: the controller's, the store hook's, the proxy's."""

_SHOWN: dict[ProblemKind, str] = {
    "strategy_raised": "strategy raised {exception_type}",
    "output_rejected": "strategy output rejected",
    "circuit_open": "circuit open after {count} failures",
    "waiting": "the last run saved less than min_progress: waiting for the history to grow",
    "too_little_saved": "cold cache: the run would save less than min_progress",
    "no_payback": "the rewrite would not pay back the prompt cache it breaks",
    "not_smaller": "the run would not shrink the context: waiting for the history to grow",
    "transform_raised": "transform {source} raised {exception_type}",
    "transform_rejected": "transform {source} output rejected",
    "store_failed": "{source} could not keep the removed originals: {exception_type}",
    "store_evicted": "{source} evicted {count} entries to stay under its size bound",
    "pin_restored": "{source} lost {count} pinned message(s); put back",
    "cannot_encode": "the rewritten history cannot be sent in this format",
    "unreadable_messages": "messages not understood",
    "no_messages": "body has no 'messages' list",
    "string_input": "input is a string",
    "no_input": "body has no 'input' list",
    "unknown_window": "the model's context window is not known",
    "window_too_small": "the model's window is too small for the transforms",
    "proxy_rewriting_raised": "proxy rewriting raised {exception_type}",
    "proxy_encoding_raised": "proxy encoding raised {exception_type}",
}

_UNSAFE = re.compile(r"[^\w.:-]")
_MAX_NAME = 64


def shown_name(text: str | None) -> str:
    """A name as a header, a log line, a metric label or a span attribute may show it: word
    characters and ``.:-``, at most 64 characters (a strategy's ``name`` is free text: ``"; "``
    in it would forge a header field, and a label must not carry content).

    Example:
        >>> shown_name("my strategy; action=x")
        'my_strategy__action_x'
    """
    if not text:
        return "unknown"
    return _UNSAFE.sub("_", text)[:_MAX_NAME]


def describe_error(exc: BaseException) -> str:
    """An exception in words that quote no message content (what the string accessors say).

    ctxcompact's own errors carry text it wrote, kept to 200 characters; any other exception
    (a third-party strategy may build its message from the history) is named by its type
    only. The full text goes to :attr:`Problem.detail`, logged at DEBUG.

    Example:
        >>> describe_error(ValueError("user said: my password is hunter2"))
        'ValueError (message withheld; enable DEBUG logging to see it)'
    """
    if isinstance(exc, CtxCompactError):
        text = " ".join(str(exc).split())
        return f"{type(exc).__name__}: {text[:200]}"
    return f"{type(exc).__name__} (message withheld; enable DEBUG logging to see it)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One run-time problem: a strategy that raised, an output refused, a store that failed.

    Attributes:
        kind: What happened (:data:`ProblemKind`): ``strategy_raised``, ``output_rejected``,
            ``circuit_open`` (too many consecutive failures; ``count`` says how many),
            ``waiting`` (the last run saved less than ``min_progress``), ``too_little_saved``
            (a cold-cache run kept for nothing), ``no_payback`` (a rewrite the window did not
            need, kept for nothing: it would not pay back the cache it breaks),
            ``transform_raised``,
            ``transform_rejected``, ``store_failed`` (``count`` originals not kept, when
            known), ``store_evicted`` (the store's size bound evicted ``count`` entries: their
            recalls now say so), ``pin_restored`` (the strategy lost ``count`` pinned
            messages and the controller put them back) and the proxy's: ``cannot_encode``,
            ``unreadable_messages``, ``no_messages``, ``string_input``, ``no_input``,
            ``unknown_window``, ``window_too_small``, ``proxy_rewriting_raised``,
            ``proxy_encoding_raised``.
        source: The strategy, transform or store at fault, by name (``None`` when none is).
        exception_type: The type name of the exception, when one was raised.
        count: The number the kind names (consecutive failures, originals), else ``None``.
        message: The sentence the string accessors give: ctxcompact's own words, with a
            third-party exception named by its type only.
        detail: The free text behind it (an exception's own message): it may quote the
            conversation, so it is for DEBUG logs only.

    Example:
        >>> p = Problem.raised("transform_raised", KeyError("secret"), source="leaky")
        >>> p.shown
        'transform leaky raised KeyError'
        >>> p.detail
        "'secret'"
    """

    kind: ProblemKind
    source: str | None = None
    exception_type: str | None = None
    count: int | None = None
    message: str = ""
    detail: str | None = None

    @classmethod
    def raised(
        cls,
        kind: ProblemKind,
        exc: BaseException,
        *,
        source: str | None = None,
        message: str | None = None,
        count: int | None = None,
    ) -> Problem:
        """The problem of ``exc``; ``message`` defaults to :func:`describe_error`'s words."""
        return cls(
            kind,
            source=source,
            exception_type=type(exc).__name__,
            count=count,
            message=describe_error(exc) if message is None else message,
            detail=str(exc),
        )

    @classmethod
    def fixed(
        cls,
        kind: ProblemKind,
        message: str | None = None,
        *,
        source: str | None = None,
        count: int | None = None,
    ) -> Problem:
        """A problem with no exception behind it; ``message`` defaults to :attr:`shown`."""
        if message is None:
            message = cls(kind, source=source, count=count).shown
        return cls(kind, source=source, count=count, message=message)

    @property
    def shown(self) -> str:
        """The problem from its fields alone: what headers and log lines above DEBUG say."""
        return _SHOWN[self.kind].format(
            source=shown_name(self.source),
            exception_type=shown_name(self.exception_type),
            count=self.count,
        )

    @property
    def explained(self) -> str:
        """:attr:`shown` and the :attr:`detail` behind it, for DEBUG logs."""
        return f"{self.shown}: {self.detail}" if self.detail else self.message or self.shown

    def __str__(self) -> str:
        return self.message or self.shown
