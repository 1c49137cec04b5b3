"""Micro-benchmarks that back design choices with numbers: ``python -m processors.bench.<name>``."""
