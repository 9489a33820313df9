"""The contracts outsiders implement or call: strategies, LLMs, tools."""
