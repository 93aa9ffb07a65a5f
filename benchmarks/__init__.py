"""Benchmarks of ray_broker against peers measured in the same run.

Each module runs as `python -m benchmarks.<name> [--flags]`, prints one JSON document on stdout
and a human table on stderr; every figure that matters is a ratio against a baseline measured in
the same process, because the machines these run on are shared and noisy. See BENCHMARKS.md.
"""
