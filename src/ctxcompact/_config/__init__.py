"""The TOML configuration: validated models, worded errors, derived tables."""
