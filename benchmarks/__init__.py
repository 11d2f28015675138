"""Benchmarks for purejaxppo: `python -m benchmarks --help` (the timing suite). See benchmarks/README.md."""
