"""The :class:`~ctxcompact.LLM` adapter for Anthropic's Messages API.

Importing this module needs the ``anthropic`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..exceptions import AuthenticationError, BadResponseError, FormatError, MissingDependencyError

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError("ctxcompact.llm.anthropic (AnthropicLLM)", "anthropic") from exc

from .._contract.protocols import Completion, ToolSpec, Usage
from .._formats.anthropic import from_anthropic, to_anthropic
from ._base import SDKAdapter
from ._errors import SdkErrors

if TYPE_CHECKING:
    import httpx2

    from .._history.messages import Message
    from ._retry import RetryCallback

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicLLM", "SystemParam", "merge_system"]

DEFAULT_MAX_TOKENS = 4096
"""The completion budget when neither the call nor the adapter sets one (Anthropic needs one)."""

_SDK_ERRORS = SdkErrors(
    base=anthropic.AnthropicError,
    status=anthropic.APIStatusError,
    connection=anthropic.APIConnectionError,
    timeout=anthropic.APITimeoutError,
    validation=anthropic.APIResponseValidationError,
)
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

SystemParam = str | list[dict[str, Any]] | None
"""Anthropic's ``system`` parameter: a string, a list of text blocks, or none."""


class AnthropicLLM(SDKAdapter[anthropic.AsyncAnthropic]):
    """A chat model behind ``anthropic.AsyncAnthropic`` (Messages).

    The history's leading system messages and the ``system`` argument become the request's
    ``system`` parameter (the argument first). Thinking blocks, ``tool_use`` and
    ``tool_result`` blocks round-trip through :class:`~ctxcompact.Message` unchanged, so a
    reply can be appended to the history and sent back. Retries are the SDK's own; each is
    logged on ``ctxcompact.llm`` and passed to ``on_retry``. Usage's ``input_tokens`` is the
    whole prompt (Anthropic's uncached, cache-read and cache-write counts added up): feed it
    to :meth:`CompactionController.observe_usage`.

    Args:
        model: The model name sent with every request.
        client: A ready ``AsyncAnthropic``; then ``api_key``, ``base_url`` and ``http_client``
            must not be given, ``timeout`` and ``max_retries`` are the client's own, and
            retries are not reported.
        api_key: The key; ``None`` lets the SDK read ``ANTHROPIC_API_KEY``.
        base_url: Another endpoint (a gateway or a compatible server).
        timeout: Seconds per attempt.
        max_retries: Retries the SDK makes on 408/409/429/5xx/529 and connection failures.
        max_tokens: Default completion budget (Anthropic requires one; default 4096).
        on_retry: Called with a :class:`~ctxcompact.llm.RetryEvent` for each retry.
        http_client: An ``httpx2.AsyncClient`` to send with; the retry hooks are added to
            its ``event_hooks``.
        extra_body: Extra JSON keys merged into every request
            (``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``).

    Example:
        >>> AnthropicLLM("claude-sonnet-4-5", api_key="sk-ant-test")
        AnthropicLLM(model='claude-sonnet-4-5', base_url='https://api.anthropic.com')
    """

    provider = "anthropic"
    sdk_errors = _SDK_ERRORS

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = None,
        on_retry: RetryCallback | None = None,
        http_client: httpx2.AsyncClient | None = None,
        extra_body: Mapping[str, object] | None = None,
    ) -> None:
        self.max_tokens = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS
        super().__init__(
            model,
            client=client,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            on_retry=on_retry,
            http_client=http_client,
            extra_body=extra_body,
        )

    def _default_http_client(self, event_hooks: dict[str, list[Any]]) -> httpx2.AsyncClient:
        return anthropic.DefaultAsyncHttpxClient(event_hooks=event_hooks)

    def _build_client(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        http_client: httpx2.AsyncClient,
    ) -> anthropic.AsyncAnthropic:
        try:
            return anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )
        except anthropic.AnthropicError as exc:
            raise AuthenticationError(
                "anthropic: no credentials: pass api_key= or set ANTHROPIC_API_KEY"
            ) from exc

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Send ``messages`` and parse the answer.

        Raises:
            LLMError: a subclass from :mod:`ctxcompact.exceptions`, with the SDK's exception
                as ``__cause__``.
        """
        history_system, wire = to_anthropic(messages)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "max_tokens": max_tokens if max_tokens is not None else self.max_tokens,
        }
        merged = merge_system(system, history_system)
        if merged is not None:
            kwargs["system"] = merged
        if tools:
            kwargs["tools"] = [_tool(t) for t in tools]
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        try:
            response = await self._send(lambda: self._client.messages.create(**kwargs))
        except TypeError as exc:
            # The SDK builds without credentials and only fails here, with a TypeError.
            if "authentication" not in str(exc):
                raise
            raise AuthenticationError(
                f"anthropic model {self.model!r}: no credentials: pass api_key= or set "
                "ANTHROPIC_API_KEY"
            ) from exc
        return self._completion(response)

    def _completion(self, response: object) -> Completion:
        where = f"{self.provider} model {self.model!r}"
        dump = getattr(response, "model_dump", None)
        if dump is None:
            raise BadResponseError(f"{where}: the response is not a message: {response!r:.200}")
        data = cast("dict[str, Any]", dump(exclude_unset=True, warnings=False))
        content = data.get("content")
        if not isinstance(content, list):
            raise BadResponseError(f"{where}: the response has no content list")
        try:
            converted = from_anthropic([{"role": "assistant", "content": content}])
        except (FormatError, ValueError) as exc:
            raise BadResponseError(f"{where}: malformed content: {exc}") from exc
        if len(converted) != 1:
            raise BadResponseError(f"{where}: expected one assistant message, got {len(converted)}")
        message = converted[0]
        stop = data.get("stop_reason") or "end_turn"
        reason = _STOP_REASONS.get(stop, stop)
        if not message.tool_calls and not message.text and reason != "length":
            raise BadResponseError(f"{where}: the answer has neither text nor tool calls")
        return Completion(message=message, usage=_usage(data.get("usage")), finish_reason=reason)


def merge_system(argument: str | None, from_history: SystemParam) -> SystemParam:
    """One ``system`` parameter from the call's argument and the history's system messages."""
    if argument is None or not from_history:
        return argument if argument is not None else from_history or None
    if isinstance(from_history, str):
        return f"{argument}\n\n{from_history}"
    return [{"type": "text", "text": argument}, *from_history]


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "input_schema": dict(spec.parameters)}
    if spec.description:
        tool["description"] = spec.description
    return tool


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    read = _count(raw.get("cache_read_input_tokens"))
    write = _count(raw.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_count(raw.get("input_tokens")) + read + write,
        output_tokens=_count(raw.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
