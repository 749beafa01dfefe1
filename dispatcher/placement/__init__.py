"""Pure placement logic: quantities, demand, quota ledger, queue order and worker choice.

Nothing here does I/O; everything can be tested without a cluster.
"""
