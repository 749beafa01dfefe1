"""`python -m bench fleet`: one dispatcher and many lean workers (see bench/fleet/run.py)."""
