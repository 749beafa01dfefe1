"""The life of a claimed job: snapshot (from the caches) -> decide (pure) -> act.

`snapshot.py` reads, `decide.py` decides (one of the `actions.py`), `manager_side.py`
and `worker_side.py` write, `memory.py` holds the little each job needs remembered,
`bookkeeping.py` keeps the ledger in step with the records and the live mirrors, and
`controller.py` ties them to the watches and the work queue and executes each action.
"""
