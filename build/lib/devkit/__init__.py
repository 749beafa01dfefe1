"""The local development kit: everything that runs the dispatcher on this machine rather
than in a cluster. Local API servers with Kueue and the real Trainer chain
(`localcluster/`), the embedded environment behind `dispatcher demo` and `dispatcher up`
(`localenv.py`, `demo.py`), the TrainJob CRDs generated from the Python models
(`crd_schema.py`), and what the tests and benchmarks share: object factories
(`factories.py`) and the invariant checker (`invariants.py`).

Not part of the service's image; install with the `devkit` extra."""
