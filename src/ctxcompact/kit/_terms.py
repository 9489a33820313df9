"""Distinctive tokens: the identifiers, paths, numbers and word 6-grams that name things.

What :func:`ctxcompact.replay.removed_then_referenced` counts as content a model quoted, and
what the context guard's relevance order weighs (which dropped result the agent will miss): one
definition for both, so the measure and the strategy mean the same thing by "a name".
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["distinctive_tokens", "words"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]", re.ASCII)
_CAMEL = re.compile(r"[a-z][A-Z]", re.ASCII)
# Not after "<": "</div>" is a closing tag, not a path.
_PATH = re.compile(r"(?<![<A-Za-z0-9_.~-])[A-Za-z0-9_.~-]*(?:/[A-Za-z0-9_.~-]+)+/?", re.ASCII)
_PATH_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}/?$", re.ASCII)
_NUMBER = re.compile(r"(?<![\w.])[0-9]{4,}(?!\w)", re.ASCII)
_PUNCTUATION = "".join(sorted(set(string.punctuation) | set("“”‘’«»")))

MIN_IDENTIFIER = 6
MIN_NUMBER_DIGITS = 4
NGRAM_WORDS = 6
MIN_NGRAM_CHARS = 25


def _is_path(token: str) -> bool:
    if len(token) < 4 or not any(c.isalpha() for c in token):
        return False
    return (
        token.startswith(("~/", "./", "../"))
        or token.count("/") >= 2
        or _PATH_EXTENSION.search(token) is not None
    )


def words(text: str) -> list[str]:
    """``text`` split on white space, lower-cased, punctuation stripped from both ends."""
    stripped = (w.strip(_PUNCTUATION) for w in text.lower().split())
    return [w for w in stripped if w]


def distinctive_tokens(text: str, *, ngrams: bool = True) -> frozenset[str]:
    """The distinctive content of ``text``, as
    :func:`ctxcompact.replay.removed_then_referenced` defines it.

    * identifiers of 6+ characters in snake_case (an ``_`` between two letters or digits) or
      camelCase (a lower-case letter followed by an upper-case one);
    * paths: runs of ``[A-Za-z0-9_.~-]`` joined by ``/`` (trailing ``.`` and ``-`` dropped),
      at least 4 characters with a letter, not right after ``<`` (``</div>`` is a tag), that
      hold two ``/``, or start with ``~/``, ``./`` or ``../``, or end in a file extension
      (so ``and/or`` and ``/tmp`` are not paths, ``/tmp/x`` and ``src/a.py`` are);
    * numbers of 4+ digits not part of a word or a decimal fraction;
    * word 6-grams: six consecutive words (split on white space, lower-cased, punctuation
      stripped from both ends, joined by one space) of 25+ characters, written ``"6g:" +
      words`` (left out with ``ngrams=False``: names only, which is cheaper).

    Example:
        >>> sorted(distinctive_tokens("parse_config failed at src/app/main.py:1234 today"))
        ['1234', 'parse_config', 'src/app/main.py']
    """
    tokens: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        if len(word) >= MIN_IDENTIFIER and (_SNAKE.search(word) or _CAMEL.search(word)):
            tokens.add(word)
    tokens.update(p for p in (m.rstrip(".-") for m in _PATH.findall(text)) if _is_path(p))
    tokens.update(_NUMBER.findall(text))
    if ngrams:
        tokens.update(_ngrams(words(text)))
    return frozenset(tokens)


def _ngrams(split: Sequence[str]) -> set[str]:
    grams: set[str] = set()
    for i in range(len(split) - NGRAM_WORDS + 1):
        gram = " ".join(split[i : i + NGRAM_WORDS])
        if len(gram) >= MIN_NGRAM_CHARS:
            grams.add("6g:" + gram)
    return grams
