"""What both HTTP apps stand on: the API (``api/``) and the scoring server (``serving/``).

- ``limits``: the body limit (413 before a body over its route's limit is read) and the JSON
  nesting limit;
- ``bodies``: request bodies read as JSON under those limits and validated into typed models;
- ``errors``: every refusal in one JSON shape (``{"detail", "field"?, ...}``), 503 with
  ``Retry-After``, 401 with ``WWW-Authenticate``, a one-line 500;
- ``request_ids``: an ``X-Request-ID`` on every answer (the caller's, or a new one), in the log
  line of a failure;
- ``disconnect``: work for a request stopped when its client leaves.

No torch, no store: the API imports it without the worker, and the scoring server without the
API (``test_layers.py``).
"""
