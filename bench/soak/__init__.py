"""The soak: a steady job rate and random faults for a long time, then the invariants
(`python -m bench soak`; the run is in `run.py`)."""
