"""Token accounting: counters, the models' context windows, cache pricing."""
