"""List latency with `limit=500` over many pods, as ratios to one unpaged list in the same run.

kubectl and client-go page their lists 500 at a time; every page after the first is read at the
first page's revision. This benchmark fills one apiserver with `--pods` pods (50,000 by default),
then measures, alternating over `--rounds` so that a noisy moment of the machine hits each alike:

1. **full**: one unpaged JSON list of every pod (the reference);
2. **paged**: the same list as pages of `--limit` items, following `metadata.continue` to the
   end, with no writes in between: first-page latency, per-page p50/p99, the whole walk;
3. **paged under writes**: the same walk while a writer updates pods at `--write-rate`/s, so
   every page after the first is read at an older revision, rebuilt from the watch window.

Ratios reported: paged walk ÷ full list, and under writes ÷ without (a paged walk moves the same
objects in `pods / limit` requests, so its cost over a full list is the per-request overhead).
Prints a table and writes `benchmarks/results/list_paging.json`.

Run: `.venv/bin/python benchmarks/list_paging.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
from _common import (
    HttpConnection,
    ServerProcess,
    apply_nice,
    build_request,
    encode,
    machine,
    percentile,
    pin,
    pod_body,
    run_loop,
    server_cores,
    table,
    write_results,
)

POD_PATH: Final = "/api/v1/namespaces/default/pods"


async def fill(port: int, count: int, *, connections: int = 16) -> float:
    """Create `count` pods over keep-alive connections; seconds taken."""
    counter = itertools.count()
    t0 = time.perf_counter()

    async def client() -> None:
        conn = await HttpConnection.open(port)
        try:
            while (i := next(counter)) < count:
                raw = build_request("POST", POD_PATH, encode(pod_body(f"pod-{i:06d}", seq=str(i)), "msgpack"),
                                    "msgpack")
                status = await conn.request(raw)
                if status != 201:
                    raise RuntimeError(f"create pod-{i:06d}: HTTP {status}")
        finally:
            conn.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return time.perf_counter() - t0


async def full_list(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    """One unpaged list: seconds and items."""
    t0 = time.perf_counter()
    async with session.get(base + POD_PATH) as resp:
        body = await resp.read()
        assert resp.status == 200, body[:200]
    doc = await asyncio.to_thread(_loads, body)
    return {"seconds": time.perf_counter() - t0, "items": len(doc["items"])}


async def paged_walk(session: aiohttp.ClientSession, base: str, limit: int) -> dict[str, Any]:
    """Every page of `limit`, following continue tokens: per-page seconds and items."""
    pages: list[float] = []
    items = 0
    token = ""
    rvs = set()
    t0 = time.perf_counter()
    while True:
        params = {"limit": str(limit)}
        if token:
            params["continue"] = token
        p0 = time.perf_counter()
        async with session.get(base + POD_PATH, params=params) as resp:
            body = await resp.read()
            assert resp.status == 200, body[:300]
        pages.append(time.perf_counter() - p0)
        doc = _loads(body)
        items += len(doc["items"])
        rvs.add(doc["metadata"]["resourceVersion"])
        token = doc["metadata"].get("continue", "")
        if not token:
            break
    assert len(rvs) == 1, f"pages read at {len(rvs)} revisions"
    return {"seconds": time.perf_counter() - t0, "items": items, "pages": pages}


def _loads(body: bytes) -> Any:
    return orjson.loads(body)


async def writer(port: int, rate: float, count: int, stop: asyncio.Event) -> int:
    """Update pods at `rate`/s (PUT without resourceVersion) until `stop`; writes made."""
    conn = await HttpConnection.open(port)
    done = 0
    t0 = time.perf_counter()
    try:
        while not stop.is_set():
            name = f"pod-{done % count:06d}"
            raw = build_request("PUT", f"{POD_PATH}/{name}", encode(pod_body(name, seq=f"w{done}"), "msgpack"),
                                "msgpack")
            await conn.request(raw)
            done += 1
            delay = t0 + done / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
    finally:
        conn.close()
    return done


async def rounds(args: argparse.Namespace, port: int) -> dict[str, list[dict[str, Any]]]:
    base = f"http://127.0.0.1:{port}"
    out: dict[str, list[dict[str, Any]]] = {"full": [], "paged": [], "paged_under_writes": []}
    print(f"  filling {args.pods} pods ...", flush=True)
    seconds = await fill(port, args.pods)
    print(f"  filled in {seconds:.1f}s ({args.pods / seconds:.0f} creates/s)", flush=True)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await full_list(session, base)  # warm-up
        for r in range(args.rounds):
            out["full"].append(await full_list(session, base))
            out["paged"].append(await paged_walk(session, base, args.limit))
            stop = asyncio.Event()
            w = asyncio.create_task(writer(port, args.write_rate, args.pods, stop))
            await asyncio.sleep(0.2)
            walk = await paged_walk(session, base, args.limit)
            stop.set()
            walk["writes"] = await w
            out["paged_under_writes"].append(walk)
            print(f"  round {r + 1}: full {out['full'][-1]['seconds'] * 1e3:.0f} ms, paged "
                  f"{out['paged'][-1]['seconds'] * 1e3:.0f} ms, under writes {walk['seconds'] * 1e3:.0f} ms "
                  f"({walk['writes']} writes)", flush=True)
    return out


def summarise(data: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    summary: dict[str, dict[str, Any]] = {}
    for phase, runs in data.items():
        s: dict[str, Any] = {"seconds": median([x["seconds"] for x in runs]), "items": runs[0]["items"]}
        if "pages" in runs[0]:
            pages = sorted(p for x in runs for p in x["pages"][1:])
            s["pages"] = len(runs[0]["pages"])
            s["first_page_ms"] = median([x["pages"][0] for x in runs]) * 1e3
            s["page_p50_ms"] = percentile(pages, 50) * 1e3 if pages else 0.0
            s["page_p99_ms"] = percentile(pages, 99) * 1e3 if pages else 0.0
        summary[phase] = s
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pods", type=int, default=50_000)
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write-rate", type=float, default=200.0, help="updates/s during the third phase")
    p.add_argument("--quick", action="store_true", help="2,000 pods, 2 rounds (a smoke run)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server to a core")
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--results-dir", type=Path, default=None)
    args = p.parse_args()
    if args.quick:
        args.pods, args.rounds = 2_000, 2
    apply_nice(args.nice)
    srv_cores, load_cores = (None, None) if args.no_pin else server_cores()
    print(f"list_paging: {args.pods} pods, limit {args.limit}, {args.rounds} rounds, "
          f"writes at {args.write_rate:g}/s in the third phase", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        server = ServerProcess.start("apiserver", cores=srv_cores, log_dir=Path(tmp))
        pin(os.getpid(), load_cores)
        try:
            data = run_loop(lambda: rounds(args, server.port))
            rss = server.rss_mb()
        finally:
            server.stop()
    summary = summarise(data)
    ratios = {
        "paged_vs_full": summary["paged"]["seconds"] / summary["full"]["seconds"],
        "under_writes_vs_paged": summary["paged_under_writes"]["seconds"] / summary["paged"]["seconds"],
        "first_page_vs_full": summary["paged"]["first_page_ms"] / 1e3 / summary["full"]["seconds"],
    }
    print(table(["phase", "items", "pages", "walk ms", "first page ms", "page p50 ms", "page p99 ms"],
                [[ph, s["items"], s.get("pages", 1), s["seconds"] * 1e3, s.get("first_page_ms", "-"),
                  s.get("page_p50_ms", "-"), s.get("page_p99_ms", "-")] for ph, s in summary.items()]))
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()) + f"; server RSS {rss:.0f} MiB")
    path = write_results("list_paging", {
        "benchmark": "list_paging", "machine": machine(),
        "config": {"pods": args.pods, "limit": args.limit, "rounds": args.rounds, "write_rate": args.write_rate},
        "results": summary, "ratios": ratios, "server_rss_mb": rss,
    }, args.results_dir)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
