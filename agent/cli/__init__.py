"""`coloc-agent` commands, one module each; `main` dispatches to them."""

from agent.cli.main import main

__all__ = ["main"]
