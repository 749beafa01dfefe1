"""Benchmarks and soak runs (not CI tests): `python -m bench dispatch|peer|soak`."""
