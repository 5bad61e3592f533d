"""The config: its schema (defaults, validation) and the definition files it names."""
