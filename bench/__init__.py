"""Benchmarks and experiments behind the numbers in docs/ and bench/reports/; run each as ``python -m bench.<name>``."""
