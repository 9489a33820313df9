"""The engine: when to compact, a safe run of the strategy, events, the store hook."""
