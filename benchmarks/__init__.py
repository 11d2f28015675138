"""Benchmarks for purejaxppo; run `python -m benchmarks --help`. See benchmarks/README.md."""
