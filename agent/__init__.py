"""The coloc-agent daemon; `__version__` is the one copy of the version (pyproject.toml reads it)."""

__version__ = "0.1.0"
