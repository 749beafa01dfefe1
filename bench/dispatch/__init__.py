"""The dispatch benchmark: the dispatcher against the raw-copy floor, in one run
(`python -m bench dispatch`; the order of the run is in `run.py`)."""
