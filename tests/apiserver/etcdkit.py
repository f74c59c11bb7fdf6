"""A real etcd for tests: a single member on free loopback ports, its data in a temporary directory.

`/usr/bin/etcd` (`scripts/etcd-setup`), progress notifications every 300 ms. Without etcd the
caller's test skips, which under CI=true is a failure (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubemesh.services.mesh.state import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


@contextlib.contextmanager
def running_etcd(tmp: Path) -> Iterator[str]:
    """Start etcd with its data under `tmp`, yield its client URL, stop it after."""
    if not Path(ETCD).exists():
        pytest.skip("etcd is not installed (scripts/etcd-setup installs it)")
    port, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "etcd.log"
    cmd = [ETCD, "--name", "t", "--data-dir", str(tmp / "data"),
           "--listen-client-urls", url, "--advertise-client-urls", url,
           "--listen-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-cluster", f"t=http://127.0.0.1:{peer}",
           "--experimental-watch-progress-notify-interval", "300ms",
           "--log-level", "warn", "--logger", "zap"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd not ready after 30 s: {log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
