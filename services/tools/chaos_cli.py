"""`kubemesh chaos add|list|get|rm|reset|history`: the chaos front door from a terminal.

    kubemesh chaos add watch.hold --component scheduler --resource pods --event-type DELETED
        --release-on 'delivered:scheduler:nodes/node-1:DELETED+30' --forever
    kubemesh chaos add node.powerOff --node node-1 --duration 600
    kubemesh chaos add -f faults.yaml            # one spec, or {"items": [...]} / a list: PUT as a desired set
    kubemesh chaos list | get NAME | rm NAME... | rm --all | reset
    kubemesh chaos history --type fault --follow --output history.jsonl

Which mesh: `--kubeconfig PATH [--context C]`, or `--apiserver URL [--token-file F] [--ca-file F]`,
else the state folder `--state-dir` (default ./.kubemesh, what `kubemesh up` writes; the compose
stack's is .kubemesh/compose), else `$KUBEMESH_APISERVER` and `$KUBEMESH_TOKEN`. TLS uses the
mesh's CA wherever it is known.

Exit codes: 0 done; 1 the apiserver refused (the reason is printed) or a fault was created but
could not be applied (phase Failed, e.g. a node no kubelet hosts); 2 usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from kubemesh.services.tools.commands import Command, add_connection_arguments, endpoint_from_args

EXIT_FAILED = 1


def _configure(parser: argparse.ArgumentParser) -> None:
    # The options naming the mesh belong to every action, after it (`kubemesh chaos list --state-dir D`).
    which = argparse.ArgumentParser(add_help=False)
    add_connection_arguments(which)
    sub = parser.add_subparsers(dest="chaos_command", metavar="ACTION", required=True)

    add = sub.add_parser("add", help="create a fault (or apply a file of faults)", parents=[which])
    add.add_argument("type", nargs="?", help="fault type, e.g. watch.hold, request.error, node.powerOff")
    add.add_argument("-f", "--file", help="JSON or YAML spec ('-' = stdin); a list or {items} is a desired set")
    add.add_argument("--name")
    add.add_argument("--component")
    add.add_argument("--instance", action="append", default=[])
    add.add_argument("--node", action="append", default=[])
    add.add_argument("--webhook-configuration", help="webhook faults: the configuration's name ('*' = any)")
    add.add_argument("--webhook", help="webhook faults: one webhook of the configuration")
    add.add_argument("--mode", choices=("all", "one", "fixed", "percent"))
    add.add_argument("--value", type=float)
    add.add_argument("--verb", action="append", default=[])
    add.add_argument("--resource", action="append", default=[])
    add.add_argument("--namespace")
    add.add_argument("--object-name", help="match.name: the object's name")
    add.add_argument("--event-type", action="append", default=[])
    add.add_argument("--field", action="append", default=[], help="field condition, e.g. status.nominatedNodeName")
    add.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     help="type parameter (VALUE parsed as JSON when it can be)")
    add.add_argument("--probability", type=float)
    when = add.add_mutually_exclusive_group()
    when.add_argument("--duration", type=float, help="cluster seconds")
    when.add_argument("--forever", action="store_true", help="no duration: until removed")
    add.add_argument("--release-on", help="ON:COMPONENT:RESOURCE[/[NS/]NAME][:EVENT[,EVENT]][+DELAY][#N]")
    add.add_argument("--arm-on", help="same syntax as --release-on: the fault starts Pending")
    add.add_argument("--break-object-order", action="store_true")
    add.add_argument("-o", "--output", choices=("table", "json"), default="table")

    ls = sub.add_parser("list", help="list faults", parents=[which])
    ls.add_argument("-o", "--output", choices=("table", "json"), default="table")
    get = sub.add_parser("get", help="show one fault", parents=[which])
    get.add_argument("name")
    rm = sub.add_parser("rm", help="heal and remove faults", parents=[which])
    rm.add_argument("names", nargs="*")
    rm.add_argument("--all", action="store_true")
    sub.add_parser("reset", help="heal and remove every fault", parents=[which])
    hist = sub.add_parser("history", help="print the history as JSON lines", parents=[which])
    hist.add_argument("--since", type=int, default=0)
    hist.add_argument("--type", default="", help="comma-separated record types (request,write,delivery,fault)")
    hist.add_argument("--fault", default=None)
    hist.add_argument("--follow", action="store_true")
    hist.add_argument("--output", type=Path, default=None, help="write to this file instead of stdout")


def parse_trigger(text: str, action: str) -> dict[str, Any]:
    """`delivered:scheduler:nodes/node-1:DELETED+30#2` into a trigger spec."""
    occurrence = 1
    delay = 0.0
    if "#" in text:
        text, _, n = text.rpartition("#")
        occurrence = int(n)
    if "+" in text:
        text, _, d = text.rpartition("+")
        delay = float(d)
    parts = text.split(":")
    if len(parts) < 3:
        raise ValueError("expected ON:COMPONENT:RESOURCE[/NAME][:EVENTS][+DELAY][#N]")
    on, component, obj = parts[0], parts[1], parts[2]
    t: dict[str, Any] = {"action": action, "on": on, "component": component, "occurrence": occurrence,
                         "delay": delay}
    resource, _, rest = obj.partition("/")
    t["resource"] = resource
    if rest:
        if "/" in rest:
            t["namespace"], _, t["name"] = rest.partition("/")
        else:
            t["name"] = rest
    if len(parts) > 3 and parts[3]:
        t["eventTypes"] = parts[3].split(",")
    return t


def build_spec(args: argparse.Namespace) -> dict[str, Any]:
    """A fault spec from `kubemesh chaos add` flags."""
    spec: dict[str, Any] = {"type": args.type}
    if args.name:
        spec["name"] = args.name
    target: dict[str, Any] = {}
    if args.component:
        target["component"] = args.component
    if args.instance:
        target["instance"] = args.instance
    if args.node:
        target["node"] = args.node
    if args.webhook_configuration:
        target["webhookConfiguration"] = args.webhook_configuration
    if args.webhook:
        target["webhook"] = args.webhook
    if args.mode:
        target["mode"] = args.mode
    if args.value is not None:
        target["value"] = args.value
    spec["target"] = target
    match: dict[str, Any] = {}
    for flag, key in (("verb", "verbs"), ("resource", "resources"), ("event_type", "eventTypes"),
                      ("field", "fields")):
        if getattr(args, flag):
            match[key] = getattr(args, flag)
    if args.namespace:
        match["namespace"] = args.namespace
    if args.object_name:
        match["name"] = args.object_name
    if match:
        spec["match"] = match
    params: dict[str, Any] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--param {item!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    if params:
        spec["params"] = params
    if args.probability is not None:
        spec["probability"] = args.probability
    if args.duration is not None:
        spec["duration"] = args.duration
    elif args.forever:
        spec["duration"] = None
    triggers = []
    if args.arm_on:
        triggers.append(parse_trigger(args.arm_on, "arm"))
    if args.release_on:
        triggers.append(parse_trigger(args.release_on, "release"))
    if triggers:
        spec["trigger"] = triggers
    if args.break_object_order:
        spec["breakObjectOrder"] = True
    return spec


def _table(faults: list[dict[str, Any]]) -> None:
    rows = [["NAME", "TYPE", "TARGET", "PHASE", "INJECTED", "RECOVERED", "ENDS", "LAST ERROR"]]
    for f in faults:
        st = f.get("status") or {}
        t = f.get("target") or {}
        target = ",".join(t.get("node") or t.get("instance") or [t.get("component") or t.get("webhook")
                                                                  or t.get("webhookConfiguration", "")])
        ends = "-" if st.get("endsAt") is None else f"{st['endsAt']:.0f}"
        rows.append([f["name"], f["type"], target, st.get("phase", ""), str(st.get("injected", 0)),
                     str(st.get("recovered", 0)), ends, (st.get("lastError") or "")[:60]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _load_file(path: str) -> Any:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return yaml.safe_load(text)


async def _run(args: argparse.Namespace) -> int:
    # aiohttp and the clients only once a chaos command runs (`kubemesh --help` stays instant).
    from kubemesh.services.machinery.client import ApiConnectionError, ApiError  # noqa: PLC0415
    from kubemesh.services.mesh.chaos_client import FaultFailedError  # noqa: PLC0415
    from kubemesh.services.mesh.endpoint import EndpointError  # noqa: PLC0415

    action = args.chaos_command
    try:
        endpoint = endpoint_from_args(args)
    except EndpointError as exc:
        print(f"kubemesh chaos {action}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    async with endpoint.chaos() as chaos:
        try:
            if action == "add":
                if args.file:
                    doc = _load_file(args.file)
                    if isinstance(doc, list) or (isinstance(doc, dict) and "items" in doc):
                        out = await chaos.apply(doc if isinstance(doc, list) else doc["items"])
                        print(json.dumps({k: v for k, v in out.items() if k != "items"}))
                        return 0
                    fault = await chaos.add(doc)
                else:
                    if not args.type:
                        print("kubemesh chaos add: a fault type or -f FILE is required", file=sys.stderr)
                        return 2
                    fault = await chaos.add(build_spec(args))
                if args.output == "json":
                    print(json.dumps(fault, indent=2))
                else:
                    _table([fault])
            elif action == "list":
                faults = await chaos.list()
                if args.output == "json":
                    print(json.dumps(faults, indent=2))
                else:
                    _table(faults)
            elif action == "get":
                print(json.dumps(await chaos.get(args.name), indent=2))
            elif action == "rm":
                names = [f["name"] for f in await chaos.list()] if args.all else args.names
                for name in names:
                    f = await chaos.remove(name)
                    print(f"removed {name} ({(f or {}).get('status', {}).get('phase', '')})")
            elif action == "reset":
                out = await chaos.reset()
                print(json.dumps({"healed": [f["name"] for f in out["healed"]], "removed": out["removed"]}))
            elif action == "history":
                return await _history(chaos, args)
        except FaultFailedError as exc:
            _table([exc.fault])
            print(f"kubemesh chaos {action}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except ApiConnectionError as exc:
            print(f"kubemesh chaos {action}: cannot reach the apiserver of {endpoint.name}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except ApiError as exc:
            print(f"kubemesh chaos {action}: {exc}", file=sys.stderr)
            causes = (exc.status.get("details") or {}).get("causes") or []
            for c in causes:
                print(f"  {c.get('field')}: {c.get('message')}", file=sys.stderr)
            return EXIT_FAILED
        except ValueError as exc:
            print(f"kubemesh chaos {action}: {exc}", file=sys.stderr)
            return 2
    return 0


async def _history(chaos: Any, args: argparse.Namespace) -> int:
    types = [t for t in args.type.split(",") if t]
    out = args.output.open("w") if args.output else sys.stdout
    try:
        if args.follow:
            async for rec in chaos.follow_history(since=args.since, types=types):
                if args.fault is None or rec.get("fault") == args.fault:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
        else:
            for rec in await chaos.history(since=args.since, types=types, fault=args.fault):
                out.write(json.dumps(rec) + "\n")
    except asyncio.CancelledError:
        pass
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


COMMAND = Command(name="chaos", help="inject, list and heal faults; read the history", description=__doc__,
                  configure=_configure, run=_run)
