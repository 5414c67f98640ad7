"""The pipelines' steps without Dagster: what each asset of defs/ does, over the store, the object
store and the worker's job directory, and the one pair assembler (``training_pairs``).

Dagster-free (defs/ imports this package, never the other way round) and torch-free: a step can be
run and tested as a plain function. What the CLI and the HTTP API do is ``services``.
"""
