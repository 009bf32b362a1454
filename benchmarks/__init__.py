"""Benchmark harnesses behind ``bir bench`` and their recorded results (``benchmarks/results/``)."""
