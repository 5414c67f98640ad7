"""The scoring server under load, over HTTP: latency and throughput at several concurrencies, and
its peak memory under maximum-size requests.

The server is the real one (``serving.server.create_app`` under ``api.server.config``'s uvicorn,
the CLI's engine defaults: admission by tokens), in a process of its own so that its memory is its
own; the model is held as ``stash-pipeline serve`` holds one (``worker.serving.load_model`` of a
checkpoint archive written by the training job's writer, fp32). Only the model registry is a
stand-in (one model, loaded at start: choosing and downloading checkpoints is not measured).
Models, built here with random weights (nothing downloaded):

  tiny    4 layers, 256 wide (the benchmarks' tiny Qwen3, window 1,024 tokens)
  minilm  sentence-transformers/all-MiniLM-L6-v2's config (BERT, 6 layers, 384 wide; window 512)

Load: best-of-n requests as an agent asks them (``POST /v1/rewards``, the API's call): a context
of about 300 tokens and 8 candidate replies of 48 words, whole rewards only; ``--concurrency``
clients (default 1, 8, 32), each sending its requests one after another, ``max(16, c)`` requests
at each level. A client answered 503 waits the Retry-After it is given and asks again, as a client
should; its latency counts from its first try. Printed per model and level: requests/s,
candidates/s, p50 and p99 latency (ms), refusals and 4xx/5xx.

Memory (tiny model, ``--memory-requests`` 16 at once): conversations at the body limit (1,000
messages, about 1.9 MB of JSON each, what the API accepts), first asking for every action's reward
(each needs far more tokens than a request may: 422 after planning), then for the whole reward
only (one forward each: all answered). Printed: the server's resident memory after loading, and
its peak during each phase (VmHWM, reset between phases).

    .venv/bin/python benchmarks/serving_load.py [--models tiny,minilm] [--concurrency 1,8,32]

Last line: ``tiny_peak_mb_16_max_requests: N`` (the higher of the two memory phases).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

TOKEN = "bench-token"
CANDIDATES = 8
MAX_RETRIES = 100


def serve(kind: str, archive: str, port: int) -> None:
    """The server process: the model loaded, the real app on ``port``."""
    from stash_pipeline.worker.threads import use_cpu_threads

    use_cpu_threads()
    import uvicorn

    from stash_pipeline.api import server
    from stash_pipeline.api.settings import ServerSettings
    from stash_pipeline.core.errors import NotFoundError
    from stash_pipeline.serving.server import create_app
    from stash_pipeline.serving.settings import ServeSettings
    from stash_pipeline.worker.serving import Engine, load_model

    class OneModel:
        """The registry's part the routes use, for one model held from the start."""

        release = None

        def ready(self, evaluator: str, _timeout_s: float) -> Any:
            if evaluator != kind:
                raise NotFoundError(f"no model {evaluator}")
            return type("State", (), {"kind": "personal"})

        def refresh(self) -> None:
            pass

        def states(self) -> list[dict[str, Any]]:
            return []

        def close(self) -> None:
            pass

    engine = Engine()
    engine.add_model(kind, load_model(archive, device="cpu"))
    app = create_app(OneModel(), engine, ServeSettings(token=TOKEN, refresh_s=3600.0))
    uvicorn.Server(server.config(app, ServerSettings(max_connections=1000), host="127.0.0.1",
                                 port=port, log_level="warning")).run()


def build_archive(kind: str, folder: Path) -> Path:
    """A personal checkpoint archive of ``kind`` (random weights and score head)."""
    from best_of_n import WORDS
    from cpu_scoring import BUILDERS, checkpoint_archive

    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(30)) + "." for _ in range(2000)]
    base = folder / f"{kind}-base"
    BUILDERS[kind](base, texts)
    return checkpoint_archive(base, folder / kind)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, kind: str, archive: Path):
        self.kind, self.port = kind, free_port()
        self.process = multiprocessing.get_context("spawn").Process(
            target=serve, args=(kind, str(archive), self.port), daemon=True)
        self.process.start()
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.5)
        raise SystemExit(f"the {kind} server did not start")

    def memory_mb(self, field: str) -> float:
        """``VmRSS`` (now) or ``VmHWM`` (the peak since the last reset) of the server, in MB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise ValueError(field)

    def reset_peak(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(30)


def sentence(rng: random.Random, words: int) -> str:
    from best_of_n import WORDS

    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def best_of_n_body(kind: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    context = {"id": f"context-{seed}", "messages": [
        {"role": "user", "content": " ".join(sentence(rng, 12) for _ in range(18))}]}
    candidates = [{"role": "assistant", "content": sentence(rng, 48)} for _ in range(CANDIDATES)]
    return {"evaluator": kind, "timeout_s": 30, "request": {
        "context": _trace(context), "candidates": candidates, "actions": False}}


def large_body(kind: str, seed: int, actions: bool) -> dict[str, Any]:
    """A conversation at the body limit: 1,000 messages, tool calls and results, ~1.9 MB."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    for turn in range(250):
        messages.append({"role": "user", "content": sentence(rng, 200)})
        messages.append({"role": "assistant", "content": sentence(rng, 200), "tool_calls": [
            {"id": f"c{turn}", "name": "lookup", "arguments": {"query": sentence(rng, 150)}}]})
        messages.append({"role": "tool", "content": sentence(rng, 350),
                         "tool_call_id": f"c{turn}"})
        messages.append({"role": "assistant", "content": sentence(rng, 200)})
    return {"evaluator": kind, "timeout_s": 600, "request": {
        "conversation": _trace({"id": f"large-{seed}", "messages": messages}),
        "actions": actions}}


def _trace(trace: dict[str, Any]) -> dict[str, Any]:
    return {"owner": "bench", "agent": None, "domain": None, "metadata": {}, "tools": [],
            "contribute": False, "version": 1, **trace,
            "messages": [{"tool_calls": [], "tool_call_id": None, "name": None, **m}
                         for m in trace["messages"]]}


async def ask(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, int, int]:
    """(seconds from the first try to the answer, its status, refusals on the way)."""
    started, refused = time.perf_counter(), 0
    for _ in range(MAX_RETRIES):
        try:
            response = await client.post("/v1/rewards", json=body)
        except httpx.TransportError:  # a kept-alive connection the server closed as it was reused
            continue
        if response.status_code != 503:
            return time.perf_counter() - started, response.status_code, refused
        refused += 1
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    return time.perf_counter() - started, 503, refused


async def load(url: str, bodies: list[dict[str, Any]], concurrency: int
               ) -> tuple[float, list[tuple[float, int, int]]]:
    queue = list(bodies)
    results: list[tuple[float, int, int]] = []
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits,
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        async def worker() -> None:
            while queue:
                results.append(await ask(client, queue.pop()))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, results


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def measure_load(server: Server, levels: list[int]) -> None:
    kind = server.kind
    asyncio.run(load(server.url, [best_of_n_body(kind, 999)], 1))  # warm-up
    for concurrency in levels:
        count = max(16, concurrency)
        bodies = [best_of_n_body(kind, 1000 * concurrency + i) for i in range(count)]
        seconds, results = asyncio.run(load(server.url, bodies, concurrency))
        latencies = [r[0] for r in results]
        failed = sum(r[1] != 200 for r in results)
        print(f"{kind}_c{concurrency}: {count / seconds:.2f} requests/s, "
              f"{count * CANDIDATES / seconds:.1f} candidates/s, "
              f"p50 {1000 * statistics.median(latencies):.0f} ms, "
              f"p99 {1000 * percentile(latencies, 0.99):.0f} ms, "
              f"{sum(r[2] for r in results)} refusals retried, {failed} not answered 200",
              flush=True)


def measure_memory(server: Server, requests: int) -> float:
    kind = server.kind
    print(f"{kind}_rss_after_load_mb: {server.memory_mb('VmRSS'):.0f}")
    size = len(json.dumps(large_body(kind, 0, True)).encode())
    peaks = []
    for actions in (True, False):
        server.reset_peak()
        bodies = [large_body(kind, i, actions) for i in range(requests)]
        seconds, results = asyncio.run(load(server.url, bodies, requests))
        statuses = sorted({r[1] for r in results})
        peak = server.memory_mb("VmHWM")
        peaks.append(peak)
        print(f"{kind}_{requests}_max_requests_actions_{str(actions).lower()}: "
              f"{size / 1e6:.2f} MB each, statuses {statuses}, {seconds:.1f} s, "
              f"peak {peak:.0f} MB", flush=True)
    return max(peaks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,minilm")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--memory-requests", type=int, default=16)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",") if c]
    peak = None
    with tempfile.TemporaryDirectory(prefix="serving-load-") as folder:
        for kind in args.models.split(","):
            archive = build_archive(kind, Path(folder))
            if levels:
                server = Server(kind, archive)
                try:
                    measure_load(server, levels)
                finally:
                    server.stop()
            if kind == "tiny" and args.memory_requests:
                server = Server(kind, archive)
                try:
                    peak = measure_memory(server, args.memory_requests)
                finally:
                    server.stop()
    if peak is not None:
        print(f"tiny_peak_mb_{args.memory_requests}_max_requests: {peak:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
