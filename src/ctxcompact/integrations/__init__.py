"""Drop-in compaction for agents built on other frameworks.

* :mod:`ctxcompact.integrations.pydantic_ai`: a ``ProcessHistory`` capability for a pydantic-ai
  ``Agent``. Needs ``ctxcompact[pydantic-ai]``.
* :mod:`ctxcompact.integrations.openai_agents`: a ``call_model_input_filter`` and a ``Session``
  wrapper for the OpenAI Agents SDK. Needs ``ctxcompact[openai-agents]``.
* :mod:`ctxcompact.integrations.langchain`: an ``AgentMiddleware`` for LangChain's
  ``create_agent``. Needs ``ctxcompact[langchain]``.

Importing :mod:`ctxcompact` or this package imports none of the frameworks; each module imports
its own and raises :class:`~ctxcompact.exceptions.MissingDependencyError` with the ``pip
install`` line when it is missing. Each converts the framework's messages to a ctxcompact
history and back without losing what the history has no field for, and decides *when* with a
:class:`~ctxcompact.CompactionController`.
"""

__all__: list[str] = []  # the integrations are the submodules; each imports its framework
