"""The trace of what each tick's policies saw and decided, and its offline replay (docs/replay.md)."""
