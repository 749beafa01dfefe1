"""Pure placement logic: quantities, resource vectors and their checks, quota ledger,
capacity, queue order and worker choice.

Nothing here does I/O, and nothing knows a job kind (a kind's demand lives in `kinds/`):
everything can be tested without a cluster.
"""
