"""Builders, servers and data loaders the tests share (not tests themselves)."""
