"""``python -m stash_pipeline.worker JOB_DIR``: run one job directory (docs/worker.md)."""

from __future__ import annotations

import sys


def cli(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stash_pipeline.worker JOB_DIR", file=sys.stderr)
        return 2
    from stash_pipeline.worker.runner import main

    return main(argv[0])


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
