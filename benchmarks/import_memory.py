"""Peak memory of importing a large trace file: it must stay bounded, not grow with the file.

Writes a file of valid OpenAI-format traces (default 200 MB, as JSONL and as one JSON array),
imports each in a fresh process through ``read_path`` (consuming every record, as the store does),
and the JSONL file through the whole `stash-pipeline import` command into SQLite (one transaction),
and reports each process's peak RSS, against ``json.load`` of the same array as the naive baseline.

Then the nesting case: files 100,000 levels deep (arrays in a JSON array, objects in a JSON Lines
record, arrays in a tau2 simulation), each imported in a fresh process with the default limits in
force, which refuse them; the peak RSS of the worst. The baseline is ijson alone, without the
nesting check, on a file only 10,000 levels deep (its memory grows with the square of the depth).

    .venv/bin/python benchmarks/import_memory.py [--mb 200] [--repeats 3] [--nested-only]

``peak_rss_mb: N`` is the median peak of the worst of the three large-file cases; the last line is
``nested_peak_mb: N``, the worst peak of the nesting case (it must stay under 200).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

IMPORT_CHILD = """
import json, resource, sys, time
from stash_pipeline.importers import read_path
start = time.perf_counter()
traces = actions = 0
for record in read_path(sys.argv[1]):
    traces += 1
    actions += len(record.trace.actions())
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"traces": traces, "actions": actions, "seconds": seconds, "peak_rss_mb": peak}))
"""

# The whole command: read, validate and store in one SQLite transaction, as `stash-pipeline import`.
STORE_CHILD = """
import contextlib, io, json, os, resource, sys, tempfile, time
os.environ["STASH_HOME"] = tempfile.mkdtemp(prefix="stash-import-memory-home-")
os.environ.pop("DATABASE_URL", None)
from stash_pipeline.cli import main
start = time.perf_counter()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["import", sys.argv[1], "--json"]) == 0
summary = json.loads(out.getvalue().strip().splitlines()[-1])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"traces": summary["traces"], "actions": summary["actions"], "seconds": seconds,
                  "peak_rss_mb": peak}))
"""

# A file nested past the limit: the import must refuse it, naming the file and record.
NESTED_CHILD = """
import resource, sys
from stash_pipeline.core.errors import InputError
from stash_pipeline.importers import read_path
try:
    for _ in read_path(sys.argv[1]):
        pass
    raise SystemExit("the nested file was not refused")
except InputError as error:
    assert "nested deeper than the limit" in error.reason, error
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

NESTED_BASELINE_CHILD = """
import resource, sys, ijson
with open(sys.argv[1], "rb") as handle:
    for _ in ijson.items(handle, "item"):
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

NESTED_DEPTH = 100_000
NESTED_BASELINE_DEPTH = 10_000

NAIVE_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
with open(sys.argv[1]) as handle:
    traces = len(json.load(handle))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"traces": traces, "seconds": seconds, "peak_rss_mb": peak}))
"""


def sample_trace(i: int) -> dict:
    """A realistic support trace: system, user, a tool call and its result, an answer (~2.5 KB)."""
    return {
        "id": f"bench-{i}",
        "agent": "bench-agent",
        "domain": "retail",
        "metadata": {"task_id": str(i % 500)},
        "messages": [
            {"role": "system", "content": "You are a retail support agent. " * 20},
            {"role": "user", "content": f"Where is my order #{i}? It was due last week. " * 5},
            {"role": "assistant", "content": "Let me look that up.", "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "get_order", "arguments": json.dumps({"order_id": i})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}",
             "content": json.dumps({"order_id": i, "status": "in transit", "items": ["x"] * 40})},
            {"role": "assistant",
             "content": f"Your order #{i} is in transit and arrives soon. " * 8},
        ],
    }


def write_files(directory: Path, megabytes: int) -> tuple[Path, Path]:
    jsonl, array = directory / "traces.jsonl", directory / "traces.json"
    target = megabytes * 1024 * 1024
    written = i = 0
    with open(jsonl, "w") as lines, open(array, "w") as items:
        items.write("[\n")
        while written < target:
            line = json.dumps(sample_trace(i))
            lines.write(line + "\n")
            items.write(("," if i else "") + line + "\n")
            written += len(line) + 1
            i += 1
        items.write("]\n")
    return jsonl, array


def write_nested_files(directory: Path, depth: int) -> dict[str, Path]:
    """Files ``depth`` levels deep, written as text: json.dumps cannot nest that deep."""
    arrays, objects = "[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth
    message = '{"role": "user", "content": "hi"}'
    files = {
        "JSON array of arrays": (directory / "deep.json", arrays),
        "JSONL record with nested objects": (
            directory / "deep.jsonl", '{"messages": [' + message + '], "metadata": ' + objects
            + "}\n"),
        "tau2 simulation with nested arrays": (
            directory / "deep-tau2.json", '{"info": {},\n"simulations": [{"id": "s", "messages": ['
            + message + '], "deep": ' + arrays + "}]}"),
    }
    for path, text in files.values():
        path.write_text(text)
    return {name: path for name, (path, _) in files.items()}


def run_nested(directory: Path) -> float:
    peaks = {}
    for name, path in write_nested_files(directory, NESTED_DEPTH).items():
        result = subprocess.run([sys.executable, "-c", NESTED_CHILD, str(path)],
                                capture_output=True, text=True, check=True)
        peaks[name] = float(result.stdout.strip().splitlines()[-1])
        print(f"nested {NESTED_DEPTH} levels, {name}: refused, peak_rss_mb {peaks[name]:.0f}")
    baseline_file = write_nested_files(directory, NESTED_BASELINE_DEPTH)["JSON array of arrays"]
    result = subprocess.run([sys.executable, "-c", NESTED_BASELINE_CHILD, str(baseline_file)],
                            capture_output=True, text=True, check=True)
    print(f"baseline ijson without the nesting check, {NESTED_BASELINE_DEPTH} levels: "
          f"peak_rss_mb {float(result.stdout.strip()):.0f}")
    return max(peaks.values())


def run_child(code: str, path: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of each generated file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nested-only", action="store_true", help="only the nesting case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stash-import-memory-") as tmp:
        if not args.nested_only:
            run_large_files(Path(tmp), args.mb, args.repeats)
        print(f"nested_peak_mb: {run_nested(Path(tmp)):.0f}")


def run_large_files(directory: Path, megabytes: int, repeats: int) -> None:
    jsonl, array = write_files(directory, megabytes)
    print(f"file_mb: {jsonl.stat().st_size / 2**20:.0f} (jsonl), "
          f"{array.stat().st_size / 2**20:.0f} (array)")
    medians = {}
    layouts = (("jsonl", IMPORT_CHILD, jsonl), ("array", IMPORT_CHILD, array),
               ("jsonl into SQLite (stash-pipeline import)", STORE_CHILD, jsonl))
    for name, child, path in layouts:
        runs = [run_child(child, path) for _ in range(repeats)]
        peak = statistics.median(r["peak_rss_mb"] for r in runs)
        seconds = statistics.median(r["seconds"] for r in runs)
        medians[name] = peak
        print(f"{name}: traces {runs[0]['traces']}, actions {runs[0]['actions']}, "
              f"median {seconds:.1f} s ({runs[0]['traces'] / seconds:.0f} traces/s), "
              f"median peak_rss_mb {peak:.0f} over {repeats} runs")
    naive = run_child(NAIVE_CHILD, array)
    print(f"baseline json.load of the array: peak_rss_mb {naive['peak_rss_mb']:.0f}, "
          f"{naive['seconds']:.1f} s (one run)")
    print(f"peak_rss_mb: {max(medians.values()):.0f}")
    for path in (jsonl, array):
        path.unlink()


if __name__ == "__main__":
    main()
