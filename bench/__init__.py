"""The benchmarks: each a script (`python bench/<name>.py [--quick]`); a package only so that the type checker
names them `bench.<name>` (`bench/io.py` is not the standard library's `io`)."""
