import sys

from stash_pipeline.cli import main

sys.exit(main())
