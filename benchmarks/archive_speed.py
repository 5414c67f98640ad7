"""The checkpoint archive: seconds and size of reward-model.tar.gz at each gzip setting.

A checkpoint-shaped folder (``--model``: the tiny model, or Qwen3-0.6B's shape with random bf16
weights, 1.2 GB, whose bytes compress about as a trained model's do: both are near-normal bf16
values) archived by tarfile at gzip level 9 (the worker before issue 11, and tarfile's default),
then by the worker's ``archive`` at levels 6, 1 and 0 on one thread and on every core. Each result
is read back with tarfile and checked against the folder. Last line ``archive_seconds: N``, the
worker's default (level 1, every core).

    .venv/bin/python benchmarks/archive_speed.py [--model qwen3-0.6b-shape] [--data DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from stash_pipeline.worker.checkpoint import ARCHIVE_LEVEL, CHECKPOINT_DIR, archive

from models import add_common_arguments, base_model


def tarfile_gzip(directory: Path, destination: Path, level: int) -> Path:
    with tarfile.open(destination, "w:gz", compresslevel=level) as tar:
        for path in sorted(directory.iterdir()):
            tar.add(path, arcname=f"{CHECKPOINT_DIR}/{path.name}")
    return destination


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(archive_path: Path, directory: Path) -> None:
    expected = {f"{CHECKPOINT_DIR}/{p.name}": digest(p.read_bytes()) for p in directory.iterdir()}
    with tarfile.open(archive_path, "r:gz") as tar:
        found = {m.name: digest(tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()}
    if found != expected:
        raise SystemExit(f"{archive_path.name}: the archive does not hold the folder")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / CHECKPOINT_DIR
        shutil.copytree(base_model(args.model, args.data, args.cache), folder)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"model {args.model}: {size / 2**20:.0f} MiB in {len(list(folder.iterdir()))} files; "
              f"{cores} cores")
        settings = [("tarfile gzip 9 (before)", lambda d: tarfile_gzip(folder, d, 9))]
        for level in (6, 1, 0):
            for threads in sorted({1, cores}):
                settings.append((f"parallel gzip {level}, {threads} threads",
                                 lambda d, level=level,
                                 threads=threads: archive(folder, d, level=level, threads=threads)))
        seconds = {}
        for index, (name, make) in enumerate(settings):
            destination = Path(scratch) / f"archive-{index}.tar.gz"
            started = time.perf_counter()
            make(destination)
            seconds[name] = time.perf_counter() - started
            check(destination, folder)
            archived = destination.stat().st_size
            print(f"{name}: {seconds[name]:.2f} s, {archived / 2**20:.0f} MiB "
                  f"({archived / size:.3f} of the folder), "
                  f"{size / 2**20 / seconds[name]:.0f} MiB/s", flush=True)
            destination.unlink()
        print(f"archive_seconds: {seconds[f'parallel gzip {ARCHIVE_LEVEL}, {cores} threads']:.2f}")


if __name__ == "__main__":
    main()
