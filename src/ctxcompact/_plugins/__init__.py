"""Loading strategies by ``module:ClassName`` or entry point, with injection."""
