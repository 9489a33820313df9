"""Wire formats and conversation files <-> the provider-neutral history."""
