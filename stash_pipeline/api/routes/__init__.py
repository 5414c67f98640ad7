"""The API's routes, one module per resource; each route calls ``services`` and nothing else."""
