"""The `kubemesh` command: run a mesh on this machine and look at it.

    kubemesh bugs [--json] [--wide]           every behaviour switch, with its upstream issue and fix
    kubemesh profiles [NAME] [--json]         the version profiles: each release's defaults and switches, with sources
    kubemesh up [--nodes N] [--zones a,b] ... start a mesh in the foreground (Ctrl-C stops it)
    kubemesh status [--json]                  the processes of a running mesh and its Ready nodes
    kubemesh down                             stop a mesh that `up` started in another terminal
    kubemesh chaos add|list|get|rm|reset|history   faults through the chaos front door (`kubemesh chaos --help`)
    kubemesh store repair --data-dir D        truncate a damaged apiserver data directory at its first damage
    kubemesh plan --nodes N [--pods P] ...    topology and resources for N nodes on a real cluster (deploy/)

Subcommands are `Command` values (`kubemesh.services.tools.commands`): the built-in ones are
listed in `builtin_commands()`, others come from the `kubemesh.commands` entry-point group (an
entry point naming a `Command`, as `kubemesh scenario` does). Nothing registers itself when
imported. Heavy modules (aiohttp, the launcher) are imported only by the subcommands that need
them, so `kubemesh bugs` and `kubemesh --help` answer at once.

Exit codes: 0 success, 1 the command failed (or `status` found the mesh down or degraded),
2 usage errors (unknown flags, unknown bug switch names), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from kubemesh.services.mesh.state import STATE_FILE, MeshError, log_tail, pid_alive, read_state, state_pids
from kubemesh.services.model import bugs as bug_switches
from kubemesh.services.model import profiles as profile_table
from kubemesh.services.process import groups
from kubemesh.services.tools import chaos_cli, rbac_cli
from kubemesh.services.tools.commands import (
    Command,
    add_state_dir,
    bug_list,
    name_list,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    from kubemesh.services.mesh.launching import Mesh

ENTRY_POINT_GROUP: Final = "kubemesh.commands"


def _print_table(rows: Sequence[Sequence[str]], *, out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


# ---------------------------------------------------------------------------------------------
# kubemesh bugs


def _configure_bugs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--wide", "-w", action="store_true", help="add the summary of each bug")


def _run_bugs(args: argparse.Namespace) -> int:
    if args.json:
        doc = [{"name": b.name, "component": b.component, "issue": b.issue, "fix": b.fix,
                "summary": b.summary} for b in bug_switches.BUGS]
        print(json.dumps(doc, indent=2))
        return 0
    header = ["NAME", "COMPONENT", "ISSUE", "FIX"] + (["SUMMARY"] if args.wide else [])
    rows = [header] + [[b.name, b.component, b.issue, b.fix] + ([b.summary] if args.wide else [])
                       for b in bug_switches.BUGS]
    _print_table(rows, out=sys.stdout)
    if not args.wide:
        print(f"\nSwitch one on with `--bugs NAME[,NAME]` or {bug_switches.ENV_VAR}; "
              "`kubemesh bugs --wide` explains each.")
    return 0


# ---------------------------------------------------------------------------------------------
# kubemesh profiles


def _configure_profiles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", choices=profile_table.PROFILES, default=None,
                        help="one profile (default: every one)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _run_profiles(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else list(profile_table.PROFILES)
    resolved = [profile_table.resolve(n) for n in names]
    if args.json:
        doc = [{"name": r.name, "summary": r.summary,
                "defaults": [{"component": d.component, "flag": f"--{d.flag}", "value": d.value, "source": d.source,
                              "since": since} for d, since in r.defaults],
                "switches": [{"name": s.name, "on": s.on, "source": s.source, "since": since}
                             for s, since in r.switches],
                "features": [{"name": f.name, "enabled": f.enabled, "source": f.source, "emulation": f.emulation,
                              "since": since} for f, since in r.features]} for r in resolved]
        print(json.dumps(doc, indent=2))
        return 0
    for i, r in enumerate(resolved):
        if i:
            print()
        print(f"profile {r.name}: {r.summary}")
        rows = [["COMPONENT", "SETS", "VALUE", "FROM", "SOURCE"]]
        rows += [[d.component, f"--{d.flag}", d.value, since, d.source] for d, since in r.defaults]
        rows += [[bug_switches.BY_NAME[s.name].component, f"switch {s.name}", "on" if s.on else "off", since,
                  s.source] for s, since in r.switches]
        rows += [["-", f"gate {f.name}", "on" if f.enabled else "off", since, f"{f.source}; emulated: {f.emulation}"]
                 for f, since in r.features]
        _print_table(rows, out=sys.stdout)
    if not args.name:
        print(f"\nRun a mesh as a release with `kubemesh up --profile NAME` (or ${profile_table.ENV_VAR}); "
              "explicit flags and `--bugs [-]NAME` override it.")
    return 0


# ---------------------------------------------------------------------------------------------
# kubemesh up


def _configure_up(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="emulated nodes (default 3)")
    parser.add_argument("--kubelets", type=positive_int, default=0,
                        help="kubelet processes hosting them (at least one per zone; default: one per 5,000 nodes)")
    parser.add_argument("--zones", type=name_list, default=(), metavar="A,B",
                        help="zone names; nodes are spread evenly over them")
    parser.add_argument("--clock-rate", type=positive_float, default=1.0,
                        help="cluster seconds per wall second (default 1: real time)")
    parser.add_argument("--profile", choices=profile_table.PROFILES, default=None,
                        help=f"Kubernetes release to emulate: its defaults and bug switches (default "
                             f"${profile_table.ENV_VAR}, else current); see `kubemesh profiles`")
    env_bugs = os.environ.get(bug_switches.ENV_VAR, "")
    parser.add_argument("--bugs", type=bug_list, default=None, metavar="NAME[,NAME]",
                        help=f"bug switches to turn on, -NAME to turn a profile's off "
                             f"(default: ${bug_switches.ENV_VAR}, "
                             f"currently {env_bugs or 'empty'}); see `kubemesh bugs`")
    add_state_dir(parser)
    parser.add_argument("--seed", type=int, default=None, help="seed of every component's RNG")
    parser.add_argument("--components", type=name_list, default=None, metavar="C,C",
                        help="which components to run (default: all that exist)")
    parser.add_argument("--node-prefix", default=None, help="node name prefix")
    parser.add_argument("--capacity", default=None, help="node capacity, e.g. cpu=8,memory=32Gi,pods=110")
    parser.add_argument("--runtime", choices=("emulated", "process", "opt-in"), default="emulated",
                        help="containers: emulated (default, no process runs), process (every pod's containers "
                             "run as local processes) or opt-in (pods annotated kubemesh.io/runtime=process)")
    parser.add_argument("--pod-watch", choices=("auto", "per-node", "shared"), default="auto",
                        help="how nodes watch their pods: per-node (a watch per node, as real kubelets), shared "
                             "(one per kubelet process), or auto (default): shared for a process hosting more than "
                             "1,000 nodes")
    parser.add_argument("--store", choices=("memory", "etcd"), default="memory",
                        help="where the objects live: memory (default: the apiserver process) or etcd (an etcd of the "
                             "mesh's own unless --etcd-endpoints names one; the apiserver keeps a watch cache)")
    parser.add_argument("--etcd-endpoints", type=name_list, default=(), metavar="URL[,URL]",
                        help="client URLs of an existing etcd for --store etcd (default: one in <state-dir>/etcd)")
    parser.add_argument("--apiservers", type=positive_int, default=1,
                        help="apiserver processes over one etcd (needs --store etcd; default 1); each other component "
                             "talks to one of them, round robin")
    parser.add_argument("--port", type=int, default=0, help="apiserver port (default: a free one)")
    parser.add_argument("--persist", action="store_true",
                        help="keep the apiserver's objects in <state-dir>/data across its restarts")
    parser.add_argument("--no-token", action="store_true", help="run without authentication")
    parser.add_argument("--log-level", default=None, help="log level of the components")
    parser.add_argument("--no-wait-registered", dest="wait_registered", action="store_false",
                        help="do not wait for the components to register their admin endpoints")
    parser.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True,
                        help="start the components together with the apiserver (default; faster cold start)")
    parser.add_argument("--stagger", action=argparse.BooleanOptionalAction, default=True,
                        help="start the controller-manager and the scheduler once every node is Ready (default; "
                             "faster cold start); --no-stagger starts them with the kubelets")
    parser.add_argument("--timeout", type=positive_float, default=60.0,
                        help="seconds to wait for every node to be Ready (default 60)")


def _run_up(args: argparse.Namespace) -> Awaitable[int]:
    from kubemesh.services.process import startup  # noqa: PLC0415 - only for `up`

    # The launcher's imports are on a cold start's critical path as the components' are.
    startup.prepare()
    from kubemesh.services.mesh import launching  # noqa: PLC0415 - aiohttp and the launcher only for `up`

    startup.imports_done()

    if args.bugs is None:
        try:
            args.bugs = bug_list(os.environ.get(bug_switches.ENV_VAR, ""))
        except argparse.ArgumentTypeError as exc:
            print(f"kubemesh up: ${bug_switches.ENV_VAR}: {exc}", file=sys.stderr)
            raise SystemExit(2) from exc
    kwargs: dict[str, Any] = {}
    if args.no_token:
        kwargs["token"] = None
    try:
        spec = launching.MeshSpec(
            nodes=args.nodes, kubelets=args.kubelets, zones=tuple(args.zones),
            clock_rate=args.clock_rate, bugs=tuple(args.bugs), seed=args.seed,
            profile=args.profile or profile_table.from_environment(),
            state_dir=args.state_dir, components=args.components, node_prefix=args.node_prefix,
            capacity=args.capacity, apiserver_port=args.port, persist=args.persist, runtime=args.runtime,
            log_level=args.log_level, start_timeout=args.timeout, eager=args.eager, stagger=args.stagger,
            wait_registered=args.wait_registered, pod_watch=args.pod_watch, store=args.store,
            etcd_endpoints=tuple(args.etcd_endpoints), apiservers=args.apiservers, **kwargs)
    except ValueError as exc:
        print(f"kubemesh up: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    return _up(spec)


async def _up(spec: Any) -> int:
    from kubemesh.services.mesh.launching import Mesh  # noqa: PLC0415 - only for `up` (aiohttp comes after the spawns)

    t0 = time.monotonic()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        mesh = Mesh(spec)
    except MeshError as exc:
        print(f"kubemesh up: {exc}", file=sys.stderr)
        return 1
    print(f"kubemesh: starting {spec.nodes} nodes ({', '.join(mesh.components)}) in {mesh.state_dir}",
          flush=True)
    for choice in mesh.choices():
        print(f"kubemesh: {choice}", flush=True)
    starting = asyncio.create_task(mesh.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            print(f"kubemesh: {received[0] if received else 'stop'} during start-up; stopping", flush=True)
            starting.cancel()
            try:
                await starting
            except asyncio.CancelledError:
                pass
            except MeshError:
                pass
            return 130
        try:
            starting.result()
        except MeshError as exc:
            print(f"kubemesh up: {exc}", file=sys.stderr)
            return 1
        _print_ready(mesh, seconds=time.monotonic() - t0)
        while not stop.is_set():
            crash = asyncio.create_task(mesh.wait_exit())
            await asyncio.wait({crash, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if crash.done():
                info = crash.result()
                print(f"kubemesh: {info.name} (pid {info.pid}) exited with {info.returncode}; "
                      f"the rest keeps running. Log tail:\n{log_tail(info.log_path, 20)}",
                      file=sys.stderr, flush=True)
            else:
                crash.cancel()
        print(f"kubemesh: {received[0] if received else 'stop'}: stopping every process", flush=True)
        return 0
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
        await mesh.stop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        print("kubemesh: stopped", flush=True)


def _print_ready(mesh: Mesh, *, seconds: float) -> None:
    nodes = sum(p.nodes for p in mesh.processes)
    kc = mesh.kubeconfig_path
    print(f"kubemesh: {nodes} nodes Ready in {seconds:.2f} s (wall, from start to every node Ready)")
    if len(mesh.apiserver_urls) > 1:
        print(f"apiservers: {', '.join(mesh.apiserver_urls)} (the kubeconfig names the first)")
    print(f"apiserver: {mesh.apiserver_url}  clock rate: {mesh.spec.clock_rate:g}  profile: {mesh.spec.profile}  "
          f"bugs: {','.join(mesh.spec.bugs) or 'none beyond the profile'}")
    rows = [["NAME", "PID", "PORT", "LOG"]] + [
        [p.name, str(p.pid), str(p.port or "-"), str(p.log_path)] for p in mesh.processes]
    _print_table(rows, out=sys.stdout)
    state = mesh.state_dir
    print(f"""
Use it:
  export KUBECONFIG={kc}
  kubectl get nodes
Token: {mesh.token_path if mesh.token else "none (no authentication)"}
Stop: Ctrl-C here, or `kubemesh down --state-dir {state}` from another terminal.""", flush=True)


# ---------------------------------------------------------------------------------------------
# kubemesh down


def _configure_down(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    parser.add_argument("--grace", type=positive_float, default=10.0,
                        help="seconds between SIGTERM and SIGKILL (default 10)")


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


async def _wait_gone(pids: Sequence[tuple[int, int | None]], deadline: float) -> list[tuple[int, int | None]]:
    while True:
        alive = [p for p in pids if pid_alive(*p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        await asyncio.sleep(0.05)


async def _run_down(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    doc = read_state(state_dir)
    if doc is None:
        print(f"kubemesh down: no mesh is running from {state_dir} (no {STATE_FILE})")
        return 0
    pids = state_pids(doc)
    launcher, components = pids[0], pids[1:]
    # The launcher (`kubemesh up`) stops its processes in order (components, then apiserver).
    if pid_alive(*launcher):
        _signal_pid(launcher[0], signal.SIGTERM)
        await _wait_gone([launcher, *components], time.monotonic() + args.grace)
    left = [p for p in components if pid_alive(*p)]
    for pid, _ in left:
        _signal_pid(pid, signal.SIGTERM)
    left = await _wait_gone(left, time.monotonic() + args.grace)
    for pid, _ in [p for p in [launcher, *left] if pid_alive(*p)]:
        _signal_pid(pid, signal.SIGKILL)
    left = await _wait_gone([launcher, *components], time.monotonic() + 5.0)
    groups.reap(state_dir / "pods")  # containers of the process runtime whose kubelet died first
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    if left:
        print(f"kubemesh down: still alive after SIGKILL: {', '.join(str(p) for p, _ in left)}",
              file=sys.stderr)
        return 1
    print(f"kubemesh down: stopped the mesh of {state_dir} ({len(components)} processes)")
    return 0


# ---------------------------------------------------------------------------------------------
# kubemesh status


def _configure_status(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")


async def _run_status(args: argparse.Namespace) -> int:
    import aiohttp  # noqa: PLC0415 - only the commands that talk to a mesh pay for aiohttp

    from kubemesh.services.mesh.endpoint import EndpointError, MeshEndpoint, node_is_ready  # noqa: PLC0415 - idem

    state_dir: Path = args.state_dir
    doc = read_state(state_dir)
    if doc is None:
        if args.json:
            print(json.dumps({"running": False, "stateDir": str(state_dir)}))
        else:
            print(f"no mesh is running from {state_dir}")
        return 1
    procs = []
    for p in doc.get("processes") or []:
        alive = isinstance(p.get("pid"), int) and pid_alive(p["pid"], p.get("startTicks"))
        procs.append({"name": p.get("name"), "component": p.get("component"), "pid": p.get("pid"),
                      "alive": alive, "port": p.get("port"), "url": p.get("url"), "log": p.get("log"),
                      **({"apiserver": p["apiserver"]} if p.get("apiserver") else {})})
    launcher = doc.get("launcher") or {}
    launcher_alive = isinstance(launcher.get("pid"), int) and pid_alive(launcher["pid"],
                                                                        launcher.get("startTicks"))
    nodes_total = nodes_ready = 0
    api_error = None
    not_ready: list[str] = []
    try:
        nodes = await MeshEndpoint.from_state_dir(state_dir).nodes()
        nodes_total = len(nodes)
        nodes_ready = sum(1 for n in nodes if node_is_ready(n))
        not_ready = [str((n.get("metadata") or {}).get("name")) for n in nodes if not node_is_ready(n)]
    except (aiohttp.ClientError, OSError, TimeoutError, EndpointError) as exc:
        api_error = f"{type(exc).__name__}: {exc}"
    expected = sum(int(p.get("nodes") or 0) for p in doc.get("processes") or [])
    healthy = (all(p["alive"] for p in procs) and api_error is None and nodes_ready >= expected)
    report = {
        "running": True, "healthy": healthy, "stateDir": str(state_dir), "apiserver": doc.get("apiserver"),
        "kubeconfig": doc.get("kubeconfig"),
        "launcher": {"pid": launcher.get("pid"), "alive": launcher_alive},
        "processes": procs,
        "nodes": {"expected": expected, "total": nodes_total, "ready": nodes_ready, "notReady": not_ready},
        "apiError": api_error,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if healthy else 1
    print(f"mesh: {state_dir}  apiserver: {doc.get('apiserver')}  "
          f"{'healthy' if healthy else 'DEGRADED'}")
    print(f"launcher: pid {launcher.get('pid')} {'alive' if launcher_alive else 'gone'}")
    several = len(doc.get("apiservers") or ()) > 1  # which apiserver each component talks to matters
    rows = [["NAME", "PID", "STATE", "PORT", "URL", *(["APISERVER"] if several else [])]] + [
        [str(p["name"]), str(p["pid"]), "alive" if p["alive"] else "DEAD" if p["pid"] is not None
         else "not started", str(p["port"] or "-"),
         str(p["url"] or "-"), *([str(p.get("apiserver") or "-")] if several else [])] for p in procs]
    _print_table(rows, out=sys.stdout)
    if api_error:
        print(f"nodes: unknown (apiserver: {api_error})")
    else:
        extra = f"; not Ready: {', '.join(not_ready)}" if not_ready else ""
        print(f"nodes: {nodes_ready}/{nodes_total} Ready (expected {expected}){extra}")
    print(f"export KUBECONFIG={doc.get('kubeconfig')}")
    return 0 if healthy else 1


# ---------------------------------------------------------------------------------------------
# kubemesh store


def _configure_store(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    repair = sub.add_parser(
        "repair", help="truncate a damaged data directory at its first damage and report what was dropped",
        description="Truncate an apiserver data directory (--data-dir) at its first damage: the dropped bytes "
                    "are kept beside the file, and revisions continue above every one the dropped records "
                    "held. Run it on a stopped apiserver's directory.")
    repair.add_argument("--data-dir", type=Path, required=True, help="the apiserver's --data-dir")


def _run_store(args: argparse.Namespace) -> int:
    # The store's code is the apiserver's, which the tools never import: it runs in its process.
    proc = subprocess.run([sys.executable, "-m", "kubemesh.apiserver", "--data-dir", str(args.data_dir),
                           "--repair-only"], check=False)
    return 0 if proc.returncode == 0 else 1


# ---------------------------------------------------------------------------------------------
# kubemesh plan


def _configure_plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=positive_int, required=True, help="emulated nodes")
    parser.add_argument("--pods", type=int, default=0, help="pods in the cluster (their memory in every apiserver)")
    parser.add_argument("--lease-seconds", type=positive_float, default=10.0,
                        help="seconds between a node's Lease renewals (default 10, the kubelet's)")
    parser.add_argument("--status-seconds", type=positive_float, default=300.0,
                        help="seconds between posts of an unchanged node status (default 300, the current profile's)")
    parser.add_argument("--kubelet-hosts", type=positive_int, default=0,
                        help="plan with this many kubelet hosts (default: as the costs say)")
    parser.add_argument("--apiservers", type=positive_int, default=0,
                        help="plan with this many apiservers (default: as the costs say)")
    parser.add_argument("--costs", type=Path, default=None,
                        help="unit costs JSON (default: the measured ones, benchmarks/unit_costs.json)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--kustomize", type=Path, default=None, metavar="DIR",
                     help="write the plan as kustomize patches of deploy/base into DIR, one file per workload "
                          "(what deploy/overlays/*/plan/ hold)")


def _run_plan(args: argparse.Namespace) -> int:
    from kubemesh.services.tools import planning  # noqa: PLC0415 - only `plan` needs it

    settings = planning.PlanSettings(nodes=args.nodes, pods=args.pods, lease_seconds=args.lease_seconds,
                                     status_report_seconds=args.status_seconds, kubelet_hosts=args.kubelet_hosts,
                                     apiservers=args.apiservers)
    try:
        costs = planning.load_unit_costs(args.costs)
    except (OSError, KeyError, ValueError) as exc:
        print(f"kubemesh plan: cannot read the unit costs: {exc}", file=sys.stderr)
        return 1
    result = planning.plan(settings, costs)
    if args.json:
        print(json.dumps(result.to_document(), indent=2))
    elif args.kustomize is not None:
        args.kustomize.mkdir(parents=True, exist_ok=True)
        for name, text in planning.render_patches(result).items():
            (args.kustomize / name).write_text(text)
            print(args.kustomize / name)
    else:
        sys.stdout.write(planning.render_text(result))
    return 0


# ---------------------------------------------------------------------------------------------

def builtin_commands() -> tuple[Command, ...]:
    """The subcommands kubemesh itself has, in help order."""
    return (
        Command(name="bugs", help="list every behaviour switch (historic bug)", configure=_configure_bugs,
                run=_run_bugs),
        Command(name="profiles", help="list the version profiles (each release's defaults and switches)",
                configure=_configure_profiles, run=_run_profiles),
        Command(name="up", help="start a mesh in the foreground (Ctrl-C stops it)", configure=_configure_up,
                run=_run_up),
        Command(name="status", help="show the processes and nodes of a running mesh", configure=_configure_status,
                run=_run_status),
        Command(name="down", help="stop a mesh started by `kubemesh up`", configure=_configure_down, run=_run_down),
        chaos_cli.COMMAND,
        Command(name="store", help="check and repair an apiserver data directory (`kubemesh store repair`)",
                configure=_configure_store, run=_run_store),
        rbac_cli.RBAC_COMMAND,
        rbac_cli.KUBECONFIG_COMMAND,
        Command(name="plan", help="plan the topology and resources of N emulated nodes on a real cluster",
                configure=_configure_plan, run=_run_plan),
    )


def entry_point_commands() -> list[Command]:
    """The commands other packages add through the `kubemesh.commands` entry-point group."""
    out: list[Command] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        if not isinstance(loaded, Command):
            raise TypeError(f"entry point {ep.name} = {ep.value} is not a kubemesh Command")
        out.append(loaded)
    return out


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    """The `kubemesh` argument parser with these subcommands (a later one of a name replaces an earlier)."""
    parser = argparse.ArgumentParser(
        prog="kubemesh",
        description="The Kubernetes control plane emulated as an asyncio microservice mesh.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in {c.name: c for c in commands}.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kubemesh` with `argv` (default: the process's arguments); return the exit code."""
    parser = build_parser([*builtin_commands(), *entry_point_commands()])
    try:
        args = parser.parse_args(argv)
        result = args._run(args)
        if inspect.isawaitable(result):
            result = asyncio.run(_as_coroutine(result))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        return 130
    return int(result)


async def _as_coroutine(aw: Awaitable[int]) -> int:
    return await aw
