"""The :class:`~ctxcompact.LLM` adapter for OpenAI Chat Completions and compatible servers.

Works with OpenAI itself and, through ``base_url``, with any server that speaks the Chat
Completions API: vLLM, llama.cpp's server, Ollama (``http://localhost:11434/v1``), LiteLLM.
Importing this module needs the ``openai`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from ..exceptions import AuthenticationError, BadResponseError, FormatError, MissingDependencyError

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError("ctxcompact.llm.openai (OpenAIChatLLM)", "openai") from exc

from .._contract.protocols import Completion, ToolSpec, Usage
from .._formats.openai_chat import from_openai, to_openai
from ._base import SDKAdapter
from ._errors import SdkErrors

if TYPE_CHECKING:
    import httpx2

    from .._history.messages import Message
    from ._retry import RetryCallback

__all__ = ["MaxTokensField", "OpenAIChatLLM"]

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
"""The request field the completion budget goes in (OpenAI's newer models refuse ``max_tokens``)."""

_SDK_ERRORS = SdkErrors(
    base=openai.OpenAIError,
    status=openai.APIStatusError,
    connection=openai.APIConnectionError,
    timeout=openai.APITimeoutError,
    validation=openai.APIResponseValidationError,
)
# Keys of a response message that mean nothing when sent back as input.
_RESPONSE_ONLY_KEYS = frozenset({"annotations"})
_FINISH_REASONS = {"function_call": "tool_calls"}


class OpenAIChatLLM(SDKAdapter[openai.AsyncOpenAI]):
    """A chat model behind ``openai.AsyncOpenAI`` (Chat Completions).

    Retries are the SDK's own (``max_retries``, exponential backoff with jitter, the
    server's ``Retry-After``); each retry is logged on the ``ctxcompact.llm`` logger and
    passed to ``on_retry``. Errors are mapped to :mod:`ctxcompact.exceptions`. The returned
    :class:`~ctxcompact.Completion` carries the provider's usage: feed it to
    :meth:`CompactionController.observe_usage` so the trigger uses the provider's count.

    Args:
        model: The model name sent with every request.
        client: A ready ``AsyncOpenAI``; then ``api_key``, ``base_url`` and ``http_client``
            must not be given, ``timeout`` and ``max_retries`` are the client's own, and
            retries are not reported (the adapter cannot hook a client it did not build).
        api_key: The key; ``None`` lets the SDK read ``OPENAI_API_KEY``.
        base_url: An OpenAI-compatible endpoint (``http://127.0.0.1:8000/v1``).
        timeout: Seconds per attempt.
        max_retries: Retries the SDK makes on 408/409/429/5xx and connection failures.
        max_tokens: Default completion budget when :meth:`complete` is given none.
        max_tokens_field: The request key for the budget. Default: ``max_completion_tokens``
            for OpenAI itself (its newer models reject ``max_tokens``), ``max_tokens`` with a
            ``base_url`` (what vLLM, llama.cpp and Ollama honour).
        on_retry: Called with a :class:`~ctxcompact.llm.RetryEvent` for each retry.
        http_client: An ``httpx2.AsyncClient`` to send with (proxies, a test transport);
            the retry hooks are added to its ``event_hooks``.
        extra_body: Extra JSON keys merged into every request (``{"temperature": 0}``).

    Example:
        >>> llm = OpenAIChatLLM("gpt-4o-mini", api_key="sk-test")
        >>> llm
        OpenAIChatLLM(model='gpt-4o-mini', base_url='https://api.openai.com/v1/')
    """

    provider = "openai"
    sdk_errors = _SDK_ERRORS

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = None,
        max_tokens_field: MaxTokensField | None = None,
        on_retry: RetryCallback | None = None,
        http_client: httpx2.AsyncClient | None = None,
        extra_body: Mapping[str, object] | None = None,
    ) -> None:
        self.max_tokens = max_tokens
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
        if max_tokens_field is None:
            official = self._client.base_url.host == "api.openai.com"
            max_tokens_field = "max_completion_tokens" if official else "max_tokens"
        self.max_tokens_field: MaxTokensField = max_tokens_field

    def _default_http_client(self, event_hooks: dict[str, list[Any]]) -> httpx2.AsyncClient:
        return openai.DefaultAsyncHttpxClient(event_hooks=event_hooks)

    def _build_client(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        http_client: httpx2.AsyncClient,
    ) -> openai.AsyncOpenAI:
        try:
            return openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )
        except openai.OpenAIError as exc:  # the SDK refuses to build without a key
            raise AuthenticationError(
                "openai: no API key: pass api_key= or set OPENAI_API_KEY "
                "(any non-empty value works for a local server without auth)"
            ) from exc

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Send ``messages`` (after ``system``, as a leading system message) and parse the answer.

        Raises:
            LLMError: a subclass from :mod:`ctxcompact.exceptions`, with the SDK's exception
                as ``__cause__``.
        """
        wire: list[dict[str, Any]] = to_openai(messages)
        if system is not None:
            wire.insert(0, {"role": "system", "content": system})
        limit = max_tokens if max_tokens is not None else self.max_tokens
        kwargs: dict[str, Any] = {"model": self.model, "messages": wire}
        if tools:
            kwargs["tools"] = [_tool(t) for t in tools]
        if limit is not None:
            kwargs[self.max_tokens_field] = limit
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        response = await self._send(lambda: self._client.chat.completions.create(**kwargs))
        return self._completion(response)

    def _completion(self, response: object) -> Completion:
        where = f"{self.provider} model {self.model!r}"
        dump = getattr(response, "model_dump", None)
        if dump is None:
            raise BadResponseError(
                f"{where}: the response is not a chat completion: {response!r:.200}"
            )
        data = cast("dict[str, Any]", dump(exclude_unset=True, warnings=False))
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise BadResponseError(f"{where}: the response has no choices")
        choice = choices[0]
        raw = choice.get("message")
        if not isinstance(raw, Mapping):
            raise BadResponseError(f"{where}: the first choice has no message")
        wire = {
            k: v
            for k, v in raw.items()
            if k not in _RESPONSE_ONLY_KEYS and (v is not None or k == "content")
        }
        wire["role"] = "assistant"
        try:
            (message,) = from_openai([wire])
        except (FormatError, ValueError) as exc:
            raise BadResponseError(f"{where}: malformed message: {exc}") from exc
        reason = choice.get("finish_reason") or "stop"
        reason = _FINISH_REASONS.get(reason, reason)
        if not message.tool_calls and not message.text and reason != "length":
            raise BadResponseError(f"{where}: the answer has neither text nor tool calls")
        return Completion(message=message, usage=_usage(data.get("usage")), finish_reason=reason)


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {"name": spec.name, "parameters": dict(spec.parameters)}
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else 0
    return Usage(
        input_tokens=_count(raw.get("prompt_tokens")),
        output_tokens=_count(raw.get("completion_tokens")),
        cache_read_tokens=_count(cached),
    )
