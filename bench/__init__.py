"""Benchmarks: each module runs one measurement and can be imported by the others."""
