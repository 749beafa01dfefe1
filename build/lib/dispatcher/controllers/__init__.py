"""Reconcilers, one concern each: workers, jobs (dispatch and status), garbage collection."""
