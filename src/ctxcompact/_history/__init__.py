"""The provider-neutral history: messages, positional tool-call groups, validation."""
