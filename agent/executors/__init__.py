"""Executors: carry out actions decided by the policies; they never decide."""
