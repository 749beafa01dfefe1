"""The life of a claimed job: snapshot (from the caches) -> decide (pure) -> act.

`snapshot.py` reads, `decide.py` decides, `manager_side.py` and `worker_side.py` write,
`memory.py` holds the little each job needs remembered, `controller.py` ties them to
the watches and the work queue.
"""
