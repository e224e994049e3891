"""Benchmarks that print and record the project's figures (run as modules, never from the tests)."""
