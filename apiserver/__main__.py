"""`python -m kubemesh.apiserver`: the kubemesh apiserver process."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from collections.abc import Callable
from pathlib import Path

from kubemesh.services.process import startup

startup.prepare()  # before the heavy imports below (see kubemesh.services.process.startup)

from kubemesh.apiserver.admission import DEFAULT_TOLERATION_SECONDS, TolerationDefaults  # noqa: E402
from kubemesh.apiserver.etcdstore import StorageError  # noqa: E402
from kubemesh.apiserver.server import ServerSettings, serve  # noqa: E402
from kubemesh.apiserver.serviceips import DEFAULT_NODE_PORT_RANGE, DEFAULT_SERVICE_CIDR, IPRange, PortRange  # noqa: E402
from kubemesh.apiserver.storage import LogBackend, StoreCorrupt, StoreWriteError  # noqa: E402
from kubemesh.apiserver.watching import WatchSettings  # noqa: E402
from kubemesh.services.model import profiles  # noqa: E402


def parse_args(argv: list[str] | None = None) -> ServerSettings:
    """Command-line flags into settings."""
    return _parse(argv)[0]


def _parse(argv: list[str] | None = None) -> tuple[ServerSettings, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m kubemesh.apiserver", description="kubemesh apiserver")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=6443, help="port to bind (default 6443)")
    p.add_argument("--data-dir", default=None, help="keep state in this directory (log + snapshots)")
    p.add_argument("--fsync", action=argparse.BooleanOptionalAction, default=True,
                   help="acknowledge a write only once an fdatasync of the log covers it (group commit; survives a "
                        "machine crash); --no-fsync acknowledges after the write(2), which survives a process "
                        "kill only (default: --fsync)")
    p.add_argument("--storage", choices=("memory", "etcd"), default="memory",
                   help="memory (default: this process keeps the objects, durable with --data-dir) or etcd (objects "
                        "in etcd at --etcd-endpoints, kept here as a watch cache)")
    p.add_argument("--etcd-endpoints", default="",
                   help="etcd client URLs, comma-separated (http://127.0.0.1:2379), for --storage etcd")
    p.add_argument("--etcd-prefix", default="/registry", help="the key prefix in etcd (default /registry)")
    p.add_argument("--etcd-compaction-interval", type=float, default=300.0,
                   help="seconds between compactions of etcd, each to the revision of the one before; 0 disables "
                        "(default 300, kube-apiserver's 5m)")
    p.add_argument("--repair", action="store_true",
                   help="before serving, truncate a damaged --data-dir at its first damage, keep the dropped bytes "
                        "beside it and report what was dropped (revisions continue above every dropped one)")
    p.add_argument("--repair-only", action="store_true", help="--repair, then exit without serving")
    p.add_argument("--token-file", default=None, help="require this bearer token (file contents)")
    p.add_argument("--tls-cert-file", default=None, help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-private-key-file", default=None, help="the certificate's private key (PEM)")
    p.add_argument("--clock-rate", type=float, default=float(os.environ.get("KUBEMESH_CLOCK_RATE", "1")),
                   help="cluster seconds per wall second (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for uids and generated names")
    p.add_argument("--watch-queue", type=int, default=WatchSettings().max_queue,
                   help="events a watcher may have waiting before it is cut off as too slow (default 10000)")
    p.add_argument("--watch-window", type=int, default=WatchSettings().window,
                   help="events kept per resource for watches, stale reads and list pages at an older "
                        "revision (default 10000)")
    p.add_argument("--watch-flush-interval", type=float, default=WatchSettings().flush_interval,
                   help="most wall seconds a live event waits, beyond the end of its loop iteration, to be "
                        f"written to its watchers with others (default {WatchSettings().flush_interval:g})")
    p.add_argument("--service-cluster-ip-range", default=DEFAULT_SERVICE_CIDR,
                   help=f"CIDR of Services' cluster IPs (default {DEFAULT_SERVICE_CIDR})")
    p.add_argument("--service-node-port-range", default=DEFAULT_NODE_PORT_RANGE,
                   help=f"port range of NodePort Services (default {DEFAULT_NODE_PORT_RANGE})")
    p.add_argument("--advertise-address", default=None,
                   help="IP address of this apiserver in the `kubernetes` endpoints (default: --host, or 127.0.0.1)")
    p.add_argument("--no-system-pods", dest="system_pods", action="store_false",
                   help="leave kube-system empty: no control-plane mirror pods, no cluster DNS (default: kubeadm's)")
    p.add_argument("--authorization-mode", choices=("RBAC", "AlwaysAllow"), default="RBAC",
                   help="RBAC (default: Roles and bindings decide; system:masters may do everything) or AlwaysAllow")
    p.add_argument("--component-identities", action=argparse.BooleanOptionalAction, default=True,
                   help="the components act as system:kube-scheduler, system:kube-controller-manager and "
                        "system:node:<name> (node authorizer and NodeRestriction) under their bootstrap roles; "
                        "--no-component-identities: they act as the admin (default on)")
    p.add_argument("--anonymous-auth", action=argparse.BooleanOptionalAction, default=False,
                   help="requests without a bearer token act as system:anonymous and RBAC decides (kube-apiserver's "
                        "default); off, they get 401 (default off)")
    p.add_argument("--log-level", default="info")
    for which in ("not-ready", "unreachable"):
        p.add_argument(f"--default-{which}-toleration-seconds", type=int, default=DEFAULT_TOLERATION_SECONDS,
                       help=f"tolerationSeconds of the {which} NoExecute toleration every pod gets (default 300)")
        p.add_argument(f"--{which}-taint-key", default=None,
                       help=f"the {which} taint key those tolerations name (kubemesh; a profile sets the release's)")
    profiles.add_argument(p)
    a = p.parse_args(argv)
    try:
        profiles.apply_defaults(p, component="apiserver", profile=a.profile)
    except (profiles.UnknownProfileError, LookupError) as exc:
        p.error(str(exc))
    a = p.parse_args(argv)
    token = os.environ.get("KUBEMESH_TOKEN") or None
    if a.token_file:
        token = Path(a.token_file).read_text().strip() or None
    if bool(a.tls_cert_file) != bool(a.tls_private_key_file):
        p.error("--tls-cert-file and --tls-private-key-file go together")
    if a.watch_flush_interval < 0:
        p.error("--watch-flush-interval must not be negative")
    if a.watch_queue < 1:
        p.error("--watch-queue must be at least 1")
    try:
        IPRange.parse(a.service_cluster_ip_range)
        PortRange.parse(a.service_node_port_range)
    except ValueError as exc:
        p.error(f"--service-cluster-ip-range / --service-node-port-range: {exc}")
    if a.watch_window < 1:
        p.error(f"--watch-window must be at least 1: {a.watch_window}")
    if a.advertise_address is not None and not _is_ip(a.advertise_address):
        p.error(f"--advertise-address must be an IP address: {a.advertise_address!r}")
    if (a.repair or a.repair_only) and not a.data_dir:
        p.error("--repair needs --data-dir")
    endpoints = tuple(e.strip() for e in a.etcd_endpoints.split(",") if e.strip())
    if a.storage == "etcd" and not endpoints:
        p.error("--storage etcd needs --etcd-endpoints")
    if a.etcd_compaction_interval < 0:
        p.error("--etcd-compaction-interval must not be negative")
    if a.storage == "etcd" and a.data_dir:
        p.error("--storage etcd keeps the objects in etcd: --data-dir does not go with it")
    return ServerSettings(host=a.host, port=a.port, data_dir=a.data_dir, fsync=a.fsync, token=token,
                          storage=a.storage, etcd_endpoints=endpoints, etcd_prefix=a.etcd_prefix,
                          etcd_compaction_interval=a.etcd_compaction_interval,
                          clock_rate=a.clock_rate, seed=a.seed, tls_cert=a.tls_cert_file,
                          tls_key=a.tls_private_key_file,
                          watch=WatchSettings(max_queue=a.watch_queue, window=a.watch_window,
                                              flush_interval=a.watch_flush_interval),
                          service_cluster_ip_range=a.service_cluster_ip_range,
                          service_node_port_range=a.service_node_port_range, advertise_address=a.advertise_address,
                          system_pods=a.system_pods, authorization_mode=a.authorization_mode, profile=a.profile,
                          tolerations=TolerationDefaults(
                              not_ready_key=a.not_ready_taint_key or TolerationDefaults().not_ready_key,
                              unreachable_key=a.unreachable_taint_key or TolerationDefaults().unreachable_key,
                              not_ready_seconds=a.default_not_ready_toleration_seconds,
                              unreachable_seconds=a.default_unreachable_toleration_seconds),
                          component_identities=a.component_identities, anonymous_auth=a.anonymous_auth), a


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT; 1 when the data directory is damaged (the reason on stderr)."""
    startup.imports_done()
    settings, a = _parse(argv)
    if a.repair or a.repair_only:
        assert settings.data_dir is not None
        try:
            report = LogBackend(settings.data_dir).repair()
        except (StoreCorrupt, OSError) as exc:
            print(f"apiserver: repair failed: {exc}", file=sys.stderr)
            return 1
        print(f"apiserver: {report.summary() if report else f'{settings.data_dir}: no damage found'}",
              file=sys.stderr)
        if a.repair_only:
            return 0
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    try:
        import uvloop  # noqa: PLC0415 - optional (not on Windows): the stock loop works, only slower
        factory = uvloop.new_event_loop
    except ImportError:  # uvloop is optional: the stock loop works, only slower
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            runner.run(serve(settings))
        except StoreCorrupt as exc:
            print(f"apiserver: {exc}", file=sys.stderr)
            return 1
        except StoreWriteError as exc:  # a first start on a full disk: nothing to serve yet
            print(f"apiserver: cannot start: {exc}", file=sys.stderr)
            return 1
        except StorageError as exc:  # --storage etcd: etcd unreachable at start-up
            print(f"apiserver: cannot start: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
