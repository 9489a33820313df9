"""A small tool-calling agent whose history is kept inside the context window."""
