"""Serving the evaluators: the scoring server (``stash-pipeline serve``), the API's client of it,
and what RL trainers call (OpenRLHF's remote reward model, TRL's reward functions).

Only ``server.py``, ``models.py`` and ``trl.py`` load the worker (and so torch); the API imports
``client.py`` and ``protocol.py``, which never do. docs/serving.md describes it.
"""
