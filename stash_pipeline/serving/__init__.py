"""Serving the evaluators: the scoring server (``stash-pipeline serve``), the API's client of it,
and what RL trainers call (OpenRLHF's remote reward model, TRL's reward functions).

The server (``server.py``, ``routes/``, ``deps.py``, ``answers.py``) loads the worker, and so torch;
``models.py`` and ``trl.py``'s ``RewardFunction`` when they load a checkpoint. The API imports
``client.py`` and ``protocol.py``, which never do; neither imports the API (both stand on
``web/``). docs/serving.md describes it.
"""
