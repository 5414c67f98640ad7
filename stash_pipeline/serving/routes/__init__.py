"""The scoring server's routes, one module per caller: ``rewards`` (the API), ``get_reward``
(OpenRLHF), ``status`` (health, what is loaded, the engine's counts)."""
