"""The tool registry and one module per contract profile."""
