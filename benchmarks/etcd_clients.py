"""Which etcd v3 client the apiserver's etcd storage uses: gRPC (`aetcd`) against etcd's JSON gateway (aiohttp).

One etcd 3.4 (`scripts/etcd-setup`), a single member on ephemeral loopback ports with its data
in a temporary directory, pinned to one core; the clients run in this process on the other
core(s). Both clients are measured in the same run, phase after phase, alternating over
`--rounds`, so that a noisy moment of the shared machine hits both alike:

- **grpc**: `aetcd` 1.0 (grpc.aio): its channel and the etcd protobuf stubs it ships
  (`KVStub.Txn/Range`, `WatchStub.Watch`), called directly, since its own watch helper drops
  progress notifications and its transaction helper drops the response header (the revision);
  what the storage layer would call.
- **gateway**: etcd's grpc-gateway over aiohttp (`POST /v3/kv/txn`, `/v3/kv/range`,
  `/v3/watch` streaming newline-delimited JSON), base64 keys and values, orjson.

Phases, each `--duration` seconds (or a fixed count):

1. `cas1`, `cas32`: compare-and-swap transactions (`mod_revision == last` then put, else
   range) by 1 and by 32 concurrent writers, each on its own key: writes/s and the client's
   process CPU (user+system, every thread) per write, in microseconds;
2. `range1000`: a range read of 1,000 keys (about 1 KiB values) back to back: ms per range,
   client CPU ms per range;
3. `watch`: one prefix watch (prev_kv, progress_notify) while 32 writers put values carrying
   their send time: events/s delivered, latency p50/p99 from send to the event's receipt.

CPU per write decides (the apiserver is CPU-bound: a client that spends less of its core per
write leaves it to the apiserver). Prints a table and writes `benchmarks/results/etcd_clients.json`.

Run: `scripts/etcd-setup && .venv/bin/python benchmarks/etcd_clients.py [--quick]`
(needs `aetcd`, which the project pins).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.metadata
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

import aiohttp
import orjson
from _common import machine, percentile, pin, round_median, run_loop, server_cores, table, write_results
from durable_writes import etcd, stop

VALUE_BYTES: Final = 1000
RANGE_KEYS: Final = 1000
WRITERS: Final = 32
CLIENTS: Final = ("grpc", "gateway")


def prefix_end(prefix: bytes) -> bytes:
    """The range end covering every key under a prefix."""
    b = bytearray(prefix)
    b[-1] += 1
    return bytes(b)


def value_at(sent: float) -> bytes:
    """A value of VALUE_BYTES carrying its send time (perf_counter) at the front."""
    head = b"%.9f " % sent
    return head + b"x" * (VALUE_BYTES - len(head))


class Client(Protocol):
    """What a phase needs of a client."""

    async def cas(self, key: bytes, value: bytes, expected: int) -> tuple[bool, int]:
        """Put when mod_revision == expected: (succeeded, the key's mod_revision now)."""
        ...

    async def range_prefix(self, prefix: bytes) -> int:
        """Read every key under a prefix: how many."""
        ...

    def watch(self, prefix: bytes, start_revision: int) -> AsyncIterator[list[bytes]]:
        """The values of each watch response's events (empty lists for progress notifications)."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


class GrpcClient:
    """aetcd's channel and stubs."""

    def __init__(self, port: int) -> None:
        import aetcd  # noqa: PLC0415 - the optional dependency measured here
        from aetcd import rpc  # noqa: PLC0415

        self.rpc = rpc
        self.client = aetcd.Client(host="127.0.0.1", port=port)

    async def start(self) -> None:
        await self.client.connect()
        self.kv = self.client.kvstub

    async def cas(self, key: bytes, value: bytes, expected: int) -> tuple[bool, int]:
        rpc = self.rpc
        req = rpc.TxnRequest(
            compare=[rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=expected)],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))])
        resp = await self.kv.Txn(req)
        if resp.succeeded:
            return True, int(resp.header.revision)
        kvs = resp.responses[0].response_range.kvs
        return False, int(kvs[0].mod_revision) if kvs else 0

    async def range_prefix(self, prefix: bytes) -> int:
        resp = await self.kv.Range(self.rpc.RangeRequest(key=prefix, range_end=prefix_end(prefix)))
        return len(resp.kvs)

    async def watch(self, prefix: bytes, start_revision: int) -> AsyncIterator[list[bytes]]:
        rpc = self.rpc
        create = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=start_revision, prev_kv=True,
            progress_notify=True))
        done = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield create
            await done.wait()

        call = rpc.WatchStub(self.client.channel).Watch(requests())
        try:
            async for resp in call:
                yield [ev.kv.value for ev in resp.events]
        finally:
            done.set()
            call.cancel()

    async def close(self) -> None:
        await self.client.close()


class GatewayClient:
    """etcd's JSON gateway over one aiohttp session."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.base + path, data=orjson.dumps(body),
                                     headers={"Content-Type": "application/json"}) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path}: {resp.status} {raw[:200]!r}")
        out: dict[str, Any] = orjson.loads(raw)
        return out

    async def cas(self, key: bytes, value: bytes, expected: int) -> tuple[bool, int]:
        k = base64.b64encode(key).decode()
        resp = await self._post("/v3/kv/txn", {
            "compare": [{"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)}],
            "success": [{"request_put": {"key": k, "value": base64.b64encode(value).decode()}}],
            "failure": [{"request_range": {"key": k}}]})
        if resp.get("succeeded"):
            return True, int(resp["header"]["revision"])
        kvs = resp["responses"][0]["response_range"].get("kvs") or []
        return False, int(kvs[0]["mod_revision"]) if kvs else 0

    async def range_prefix(self, prefix: bytes) -> int:
        resp = await self._post("/v3/kv/range", {"key": base64.b64encode(prefix).decode(),
                                                 "range_end": base64.b64encode(prefix_end(prefix)).decode()})
        return sum(1 for kv in resp.get("kvs") or () if base64.b64decode(kv["value"]))

    async def watch(self, prefix: bytes, start_revision: int) -> AsyncIterator[list[bytes]]:
        body = orjson.dumps({"create_request": {
            "key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(prefix_end(prefix)).decode(),
            "start_revision": str(start_revision), "prev_kv": True, "progress_notify": True}})
        async with self.session.post(self.base + "/v3/watch", data=body,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while (nl := buf.find(b"\n")) >= 0:
                    line, buf = buf[:nl], buf[nl + 1:]
                    result = orjson.loads(line).get("result") or {}
                    yield [base64.b64decode(ev["kv"]["value"]) for ev in result.get("events") or ()]

    async def close(self) -> None:
        await self.session.close()


async def make(name: str, port: int) -> Any:
    client: Any = GrpcClient(port) if name == "grpc" else GatewayClient(port)
    await client.start()
    return client


def cpu() -> float:
    """This process's CPU seconds (user+system, all threads: grpc's own threads count)."""
    return time.process_time()


async def cas_phase(client: Client, *, writers: int, seconds: float, tag: str) -> dict[str, Any]:
    keys = [f"/bench/cas/{tag}/{i:03d}".encode() for i in range(writers)]
    value = value_at(0.0)
    ok = conflicts = 0
    stop_at = time.perf_counter() + seconds

    async def writer(key: bytes) -> None:
        nonlocal ok, conflicts
        expected = 0  # a new key: mod_revision 0 compares equal to "absent"
        while time.perf_counter() < stop_at:
            succeeded, expected = await client.cas(key, value, expected)
            if succeeded:
                ok += 1
            else:
                conflicts += 1

    c0, t0 = cpu(), time.perf_counter()
    await asyncio.gather(*(writer(k) for k in keys))
    wall, used = time.perf_counter() - t0, cpu() - c0
    return {"writes": ok, "conflicts": conflicts, "seconds": wall, "writes_per_s": ok / wall,
            "cpu_us_per_write": used / max(ok, 1) * 1e6}


async def range_phase(client: Client, *, prefix: bytes, seconds: float) -> dict[str, Any]:
    n = 0
    c0, t0 = cpu(), time.perf_counter()
    while time.perf_counter() - t0 < seconds or n < 3:
        got = await client.range_prefix(prefix)
        if got != RANGE_KEYS:
            raise RuntimeError(f"range saw {got} keys, not {RANGE_KEYS}")
        n += 1
    wall, used = time.perf_counter() - t0, cpu() - c0
    return {"ranges": n, "ms_per_range": wall / n * 1e3, "cpu_ms_per_range": used / n * 1e3}


async def watch_phase(client: Client, writer: Client, *, seconds: float, tag: str,
                      start_revision: int) -> dict[str, Any]:
    """One watch on a prefix while WRITERS writers put into it (the writes use the same kind of client)."""
    prefix = f"/bench/watch/{tag}/".encode()
    latencies: list[float] = []
    stop_writing = asyncio.Event()
    written = 0
    ready = asyncio.Event()

    async def watch() -> None:
        async for values in client.watch(prefix, start_revision):
            ready.set()
            now = time.perf_counter()
            for v in values:
                latencies.append(now - float(v[:v.index(b" ")]))
            if stop_writing.is_set() and len(latencies) >= written:
                return

    async def put(i: int) -> None:
        nonlocal written
        key = prefix + b"%03d" % i
        expected = 0
        while not stop_writing.is_set():
            succeeded, expected = await writer.cas(key, value_at(time.perf_counter()), expected)
            written += succeeded

    task = asyncio.get_running_loop().create_task(watch())
    await asyncio.wait_for(ready.wait(), 10)  # the created response
    t0 = time.perf_counter()
    writers = [asyncio.get_running_loop().create_task(put(i)) for i in range(WRITERS)]
    await asyncio.sleep(seconds)
    stop_writing.set()
    await asyncio.gather(*writers)
    try:
        await asyncio.wait_for(task, 10)
    except TimeoutError:
        task.cancel()
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"events": len(latencies), "written": written, "events_per_s": len(latencies) / wall,
            "latency_ms_p50": percentile(latencies, 50) * 1e3, "latency_ms_p99": percentile(latencies, 99) * 1e3}


async def run(args: argparse.Namespace, port: int) -> dict[str, dict[str, list[dict[str, Any]]]]:
    clients = {name: await make(name, port) for name in CLIENTS}
    out: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in CLIENTS}
    try:
        # 1,000 keys of VALUE_BYTES to range over (written once, read by both).
        range_prefix = b"/bench/range/"
        filler: Client = clients["gateway"]
        sem = asyncio.Semaphore(WRITERS)

        async def fill(i: int) -> None:
            async with sem:
                await filler.cas(range_prefix + b"%04d" % i, value_at(0.0), 0)

        await asyncio.gather(*(fill(i) for i in range(RANGE_KEYS)))
        for name in CLIENTS:  # warm up: connections, code paths
            await cas_phase(clients[name], writers=4, seconds=0.3, tag=f"warm-{name}")
        phases: list[tuple[str, Callable[[str, int], Awaitable[dict[str, Any]]]]] = [
            ("cas1", lambda n, r: cas_phase(clients[n], writers=1, seconds=args.duration, tag=f"{n}-1-{r}")),
            ("cas32", lambda n, r: cas_phase(clients[n], writers=WRITERS, seconds=args.duration, tag=f"{n}-32-{r}")),
            ("range1000", lambda n, r: range_phase(clients[n], prefix=range_prefix, seconds=args.duration)),
        ]
        for r in range(args.rounds):
            order = CLIENTS if r % 2 == 0 else CLIENTS[::-1]
            for phase, fn in phases:
                for name in order:
                    out[name].setdefault(phase, []).append(await fn(name, r))
            for name in order:
                watcher = await make(name, port)  # its own connection, as a watch cache's would be
                try:
                    out[name].setdefault("watch", []).append(await watch_phase(
                        watcher, clients[name], seconds=args.duration, tag=f"{name}-{r}", start_revision=0))
                finally:
                    await watcher.close()
            print(f"  round {r + 1}: " + ", ".join(
                f"{n} cas1 {out[n]['cas1'][-1]['cpu_us_per_write']:.0f} µs/write" for n in CLIENTS), flush=True)
    finally:
        for client in clients.values():
            await client.close()
    return out


SUMMARY: Final = (
    ("cas1", "writes_per_s", "CAS writes/s, 1 writer"),
    ("cas1", "cpu_us_per_write", "client CPU µs/write, 1 writer"),
    ("cas32", "writes_per_s", "CAS writes/s, 32 writers"),
    ("cas32", "cpu_us_per_write", "client CPU µs/write, 32 writers"),
    ("range1000", "ms_per_range", "range of 1,000 keys, ms"),
    ("range1000", "cpu_ms_per_range", "client CPU ms per 1,000-key range"),
    ("watch", "events_per_s", "watch events/s delivered (32 writers)"),
    ("watch", "latency_ms_p50", "watch latency p50, ms"),
    ("watch", "latency_ms_p99", "watch latency p99, ms"),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=2.0, help="seconds per phase")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="0.5 s phases, 1 round (a smoke run)")
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--results-dir", type=Path, default=None)
    args = p.parse_args()
    if args.quick:
        args.duration, args.rounds = 0.5, 1
    srv_cores, load_cores = (None, None) if args.no_pin else server_cores()
    print(f"etcd_clients: {args.rounds} rounds of {args.duration:g} s phases, grpc (aetcd) and gateway alternating",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-etcd-bench-") as tmp_name:
        proc, port = etcd(Path(tmp_name), srv_cores)  # durable_writes.py's: the same etcd, started the same way
        try:
            pin(os.getpid(), load_cores)
            data = run_loop(lambda: run(args, port))
        finally:
            stop(proc)
    summary = {name: {f"{phase}.{metric}": round_median([x[metric] for x in data[name][phase]])
                      for phase, metric, _ in SUMMARY} for name in CLIENTS}
    rows = []
    for phase, metric, label in SUMMARY:
        g, w = summary["grpc"][f"{phase}.{metric}"], summary["gateway"][f"{phase}.{metric}"]
        rows.append([label, g, w, g / w if w else float("nan")])
    print(table(["median of rounds", "grpc (aetcd)", "gateway (aiohttp)", "grpc ÷ gateway"], rows))
    # The choice: client CPU per write under load (32 writers: the busy apiserver's case; the
    # 1-writer figure also counts the loop's wake-ups around each lone request), then at 1 writer.
    cpu_ratios = {phase: summary["grpc"][f"{phase}.cpu_us_per_write"] / summary["gateway"][f"{phase}.cpu_us_per_write"]
                  for phase in ("cas32", "cas1")}
    choice = "grpc" if cpu_ratios["cas32"] < 1 else "gateway"
    print("client CPU per write, grpc ÷ gateway: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu_ratios.items())
          + f" -> {choice}")
    versions: dict[str, str] = {"aiohttp": aiohttp.__version__}
    for dist in ("aetcd", "grpcio"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    path = write_results("etcd_clients", {
        "benchmark": "etcd_clients", "machine": machine(),
        "config": {"duration": args.duration, "rounds": args.rounds, "value_bytes": VALUE_BYTES,
                   "range_keys": RANGE_KEYS, "writers": WRITERS, "versions": versions},
        "rounds": data, "results": summary, "cpu_per_write_grpc_vs_gateway": cpu_ratios, "choice": choice,
    }, args.results_dir)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
