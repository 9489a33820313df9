"""What both SDK adapters share: adopting or building a client, retry hooks, error mapping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from ..exceptions import ArgumentError
from ._errors import SdkErrors, map_sdk_error
from ._retry import RetryCallback, RetryWatcher

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    import httpx2

__all__ = ["SDKAdapter"]


class _SDKClient(Protocol):
    @property
    def api_key(self) -> Any: ...

    @property
    def base_url(self) -> Any: ...

    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_SDKClient)
R = TypeVar("R")
Self = TypeVar("Self", bound="SDKAdapter[Any]")


class SDKAdapter(Generic[ClientT]):
    """Base of the SDK adapters: owns the client's lifecycle and one call path.

    Subclasses set ``provider`` and ``sdk_errors`` and build their client in
    :meth:`_build_client` with the http client that carries the retry hooks.
    """

    provider: ClassVar[str]
    sdk_errors: ClassVar[SdkErrors]
    context_window: int | None = None
    """The model's own window (``WindowedLLM``); :func:`ctxcompact.wire` sets it."""

    def __init__(
        self,
        model: str,
        *,
        client: ClientT | None,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        on_retry: RetryCallback | None,
        http_client: httpx2.AsyncClient | None,
        extra_body: Mapping[str, object] | None,
    ) -> None:
        self.model = model
        self.extra_body = dict(extra_body) if extra_body else None
        self._watcher: RetryWatcher | None = None
        if client is not None:
            if api_key is not None or base_url is not None or http_client is not None:
                raise ArgumentError(
                    "client", "give either client= or api_key=/base_url=/http_client=, not both"
                )
            if on_retry is not None:
                raise ArgumentError(
                    "on_retry",
                    "on_retry cannot hook a ready client; pass http_client= (and api_key=, "
                    "base_url=) so the adapter builds the client",
                )
            self._client: ClientT = client
            self._owns_client = False
            return
        self._watcher = RetryWatcher(
            provider=self.provider, model=model, max_retries=max_retries, on_retry=on_retry
        )
        self._owns_client = http_client is None
        if http_client is None:
            http_client = self._default_http_client(self._watcher.hooks())
        else:
            self._watcher.install(http_client)
        self._client = self._build_client(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )

    def _default_http_client(self, event_hooks: dict[str, list[Any]]) -> httpx2.AsyncClient:
        raise NotImplementedError

    def _build_client(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        max_retries: int,
        http_client: httpx2.AsyncClient,
    ) -> ClientT:
        raise NotImplementedError

    @property
    def client(self) -> ClientT:
        """The SDK client requests go through."""
        return self._client

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={str(self._client.base_url)!r})"
        )

    async def aclose(self) -> None:
        """Close the HTTP client, if this adapter created it."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self: Self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, create: Callable[[], Awaitable[R]]) -> R:
        """Run one SDK call: retries reported, SDK errors mapped to ctxcompact's tree."""
        try:
            if self._watcher is None:
                return await create()
            with self._watcher.call():
                return await create()
        except self.sdk_errors.base as exc:
            raise map_sdk_error(
                exc,
                sdk=self.sdk_errors,
                provider=self.provider,
                model=self.model,
                secret=self._secret,
            ) from exc

    @property
    def _secret(self) -> str | None:
        key = self._client.api_key
        return key if isinstance(key, str) else None
