"""The live demo and the real workloads it (and the benchmarks and end-to-end tests) run."""
