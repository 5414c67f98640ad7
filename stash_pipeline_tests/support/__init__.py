"""What the suites share: tiny models and samples, servers started for a test, waiting bounds, the
in-process compute and the module-order plugin. Imported by its full name
(``from stash_pipeline_tests.support.tiny_models import ...``); pytest puts the repository root on
``sys.path`` (``pythonpath`` in ``pyproject.toml``)."""
