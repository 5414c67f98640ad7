import sys
from pathlib import Path

# store_samples (small traces with feedback) lives beside the store suite.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
