"""The ML worker: rendering, Bradley-Terry training, scoring, checkpoints, the job runner.

The only package that imports torch, transformers and datasets; it runs in its own process
(``python -m stash_pipeline.worker JOB_DIR``), so importing this package itself stays light.
"""
