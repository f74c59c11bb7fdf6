"""Every imperative kubectl command on kubectl 1.27, 1.30 and 1.33, against an apiserver alone.

kubectl 1.32+ sends the bodies of its typed creates (`create namespace|configmap|secret|...`,
`autoscale`) as protobuf; 1.27-1.31 send JSON. Each command must succeed on each version and
leave the object kubectl meant (checked field by field), and the objects kubectl 1.33 creates
through protobuf must equal those kubectl 1.30 creates through JSON, once what the server
assigns is set aside. Each binary is called by its own path (`kubectl_command`), never through
the dispatcher on PATH. No controller runs: what a command stores is what is checked.

`autoscale` on kubectl < 1.32 creates an autoscaling/v1 HorizontalPodAutoscaler, which the
server stores at autoscaling/v2 (`apiserver.conversion`): the check reads it back at v2.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from conftest import ApiServer, KubectlCommand, LaunchApiServer

pytestmark = pytest.mark.kubectl

VERSIONS = ("1.27", "1.30", "1.33")
Json = dict[str, Any]


# ---------------------------------------------------------------------------------- the server and files


@pytest.fixture(scope="module")
def server(apiserver_launcher: LaunchApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    s = apiserver_launcher(Path(tmp_path_factory.mktemp("pbkubectl")))
    try:
        yield s
    finally:
        s.terminate()


@dataclass(frozen=True)
class Files:
    """Inputs some commands read: a TLS pair, a binary file and an editor script."""

    cert: Path
    key: Path
    binary: Path
    editor: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    base = Path(tmp_path_factory.mktemp("pbfiles"))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pb.example.com")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    (base / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (base / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                     serialization.PrivateFormat.TraditionalOpenSSL,
                                                     serialization.NoEncryption()))
    (base / "blob.bin").write_bytes(bytes(range(256)))
    editor = base / "editor.py"
    # kubectl edit runs $KUBE_EDITOR <file.yaml>: set the replicas to 7 and add a label.
    editor.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "path = sys.argv[-1]\n"
        "text = open(path).read()\n"
        "lines = []\n"
        "for line in text.splitlines():\n"
        "    if line.startswith('  replicas: '):\n"
        "        line = '  replicas: 7'\n"
        "    lines.append(line)\n"
        "    if line == '  labels:':\n"
        "        lines.append('    edited: yes-by-editor')\n"
        "open(path, 'w').write('\\n'.join(lines) + '\\n')\n")
    editor.chmod(0o755)
    return Files(cert=base / "tls.crt", key=base / "tls.key", binary=base / "blob.bin", editor=editor)


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


# ---------------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Ctx:
    """Where one run of a command lives: its namespace and the suffix of cluster-scoped names."""

    ns: str
    tag: str
    files: Files


@dataclass(frozen=True)
class Command:
    """One imperative command: its arguments, what it needs first, the object it leaves, and checks."""

    name: str
    args: Callable[[Ctx], list[str]]
    path: Callable[[Ctx], str]
    expect: Callable[[Ctx], Json]
    setup: tuple[Callable[[Ctx], list[str]], ...] = ()
    protobuf: bool = True
    """Whether kubectl 1.32+ sends this command's body as protobuf (typed creates)."""
    env: dict[str, str] = field(default_factory=dict)


def _deploy(ctx: Ctx) -> list[str]:
    return ["create", "deployment", "web", "--image=nginx:1", "--replicas=1", "--port=8080", "-n", ctx.ns]


def _ns(ctx: Ctx, plural: str, name: str, group: str = "") -> str:
    base = f"/apis/{group}" if group else "/api/v1"
    return f"{base}/namespaces/{ctx.ns}/{plural}/{name}"


def _cluster(plural: str, name: str, group: str = "") -> str:
    return f"{f'/apis/{group}' if group else '/api/v1'}/{plural}/{name}"


_APPS = "apps/v1"
_RBAC = "rbac.authorization.k8s.io/v1"
_WEB = lambda ctx: _ns(ctx, "deployments", "web", _APPS)  # noqa: E731

COMMANDS = [
    Command("create namespace", lambda c: ["create", "namespace", f"made-{c.tag}"],
            lambda c: _cluster("namespaces", f"made-{c.tag}"),
            lambda c: {"kind": "Namespace", "metadata": {"name": f"made-{c.tag}"}, "status": {"phase": "Active"}}),
    Command("create configmap",
            lambda c: ["create", "configmap", "cm", "--from-literal=a=b", "--from-literal=c=d",
                       f"--from-file=blob={c.files.binary}", "-n", c.ns],
            lambda c: _ns(c, "configmaps", "cm"),
            lambda c: {"data": {"a": "b", "c": "d"}, "binaryData": {"blob": b64(bytes(range(256)))}}),
    Command("create secret generic",
            lambda c: ["create", "secret", "generic", "sec", "--from-literal=user=admin", "--from-literal=pw=s3cr3t",
                       "-n", c.ns],
            lambda c: _ns(c, "secrets", "sec"),
            lambda c: {"type": "Opaque", "data": {"user": b64("admin"), "pw": b64("s3cr3t")}}),
    Command("create secret tls",
            lambda c: ["create", "secret", "tls", "tls", f"--cert={c.files.cert}", f"--key={c.files.key}",
                       "-n", c.ns],
            lambda c: _ns(c, "secrets", "tls"),
            lambda c: {"type": "kubernetes.io/tls", "data": {"tls.crt": b64(c.files.cert.read_bytes()),
                                                             "tls.key": b64(c.files.key.read_bytes())}}),
    Command("create serviceaccount", lambda c: ["create", "serviceaccount", "robot", "-n", c.ns],
            lambda c: _ns(c, "serviceaccounts", "robot"),
            lambda c: {"kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": c.ns}}),
    Command("create deployment", _deploy, _WEB,
            lambda c: {"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1",
                                         "ports": [{"containerPort": 8080, "protocol": "TCP"}]}]}}}}),
    Command("create job", lambda c: ["create", "job", "once", "--image=busybox", "-n", c.ns, "--", "echo", "hi"],
            lambda c: _ns(c, "jobs", "once", "batch/v1"),
            lambda c: {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "once", "image": "busybox", "command": ["echo", "hi"]}]}}}}),
    Command("create cronjob",
            lambda c: ["create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *",
                       "--restart=OnFailure", "-n", c.ns, "--", "date"],
            lambda c: _ns(c, "cronjobs", "tick", "batch/v1"),
            lambda c: {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"metadata": {"name": "tick"}, "spec": {
                "template": {"spec": {"restartPolicy": "OnFailure",
                                      "containers": [{"name": "tick", "image": "busybox", "command": ["date"]}]}}}}}}),
    Command("create role",
            lambda c: ["create", "role", "reader", "--verb=get,list", "--resource=pods,deployments.apps",
                       "--resource-name=one", "-n", c.ns],
            lambda c: _ns(c, "roles", "reader", _RBAC),
            lambda c: {"rules": [
                {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["one"]},
                {"verbs": ["get", "list"], "apiGroups": ["apps"], "resources": ["deployments"],
                 "resourceNames": ["one"]}]}),
    Command("create clusterrole",
            lambda c: ["create", "clusterrole", f"nodes-{c.tag}", "--verb=get", "--resource=nodes",
                       "--non-resource-url=/healthz", "--verb=get"],
            lambda c: _cluster("clusterroles", f"nodes-{c.tag}", _RBAC),
            lambda c: {"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]},
                                 {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
    Command("create clusterrole --aggregation-rule",
            lambda c: ["create", "clusterrole", f"agg-{c.tag}", "--aggregation-rule=rbac.example.com/agg=true"],
            lambda c: _cluster("clusterroles", f"agg-{c.tag}", _RBAC),
            lambda c: {"rules": None, "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.example.com/agg": "true"}}]}}),
    Command("create rolebinding",
            lambda c: ["create", "rolebinding", "readers", "--role=reader", "--user=alice", "--group=devs",
                       f"--serviceaccount={c.ns}:robot", "-n", c.ns],
            lambda c: _ns(c, "rolebindings", "readers", _RBAC),
            lambda c: {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                       "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                                    {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"},
                                    {"kind": "ServiceAccount", "name": "robot", "namespace": c.ns}]}),
    Command("create clusterrolebinding",
            lambda c: ["create", "clusterrolebinding", f"crb-{c.tag}", f"--clusterrole=nodes-{c.tag}",
                       "--user=bob"],
            lambda c: _cluster("clusterrolebindings", f"crb-{c.tag}", _RBAC),
            lambda c: {"roleRef": {"kind": "ClusterRole", "name": f"nodes-{c.tag}"},
                       "subjects": [{"kind": "User", "name": "bob"}]}),
    Command("create service clusterip",
            lambda c: ["create", "service", "clusterip", "front", "--tcp=80:8080", "--tcp=443:https", "-n", c.ns],
            lambda c: _ns(c, "services", "front"),
            lambda c: {"spec": {"type": "ClusterIP", "selector": {"app": "front"}, "ports": [
                {"name": "80-8080", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "443-https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}}),
    Command("create service nodeport",
            lambda c: ["create", "service", "nodeport", "edge", "--tcp=80:8080", f"--node-port={30000 + int(c.tag)}",
                       "-n", c.ns],
            lambda c: _ns(c, "services", "edge"),
            lambda c: {"spec": {"type": "NodePort", "ports": [
                {"name": "80-8080", "port": 80, "targetPort": 8080, "nodePort": 30000 + int(c.tag)}]}}),
    Command("create ingress",
            lambda c: ["create", "ingress", "ing", "--class=nginx", "--rule=foo.example.com/bar*=front:80",
                       "--rule=tls.example.com/=front:https,tls=tls", "-n", c.ns],
            lambda c: _ns(c, "ingresses", "ing", "networking.k8s.io/v1"),
            lambda c: {"spec": {"ingressClassName": "nginx", "rules": [
                {"host": "foo.example.com", "http": {"paths": [{"path": "/bar", "pathType": "Prefix", "backend": {
                    "service": {"name": "front", "port": {"number": 80}}}}]}},
                {"host": "tls.example.com", "http": {"paths": [{"path": "/", "pathType": "Exact", "backend": {
                    "service": {"name": "front", "port": {"name": "https"}}}}]}}],
                "tls": [{"hosts": ["tls.example.com"], "secretName": "tls"}]}}),
    Command("create priorityclass",
            lambda c: ["create", "priorityclass", f"high-{c.tag}", "--value=1000", "--description=important",
                       "--preemption-policy=Never"],
            lambda c: _cluster("priorityclasses", f"high-{c.tag}", "scheduling.k8s.io/v1"),
            lambda c: {"value": 1000, "description": "important", "preemptionPolicy": "Never"}),
    Command("create poddisruptionbudget",
            lambda c: ["create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=50%",
                       "-n", c.ns],
            lambda c: _ns(c, "poddisruptionbudgets", "pdb", "policy/v1"),
            lambda c: {"spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}),
    Command("create quota",
            lambda c: ["create", "quota", "q", "--hard=pods=10,requests.cpu=1", "-n", c.ns],
            lambda c: _ns(c, "resourcequotas", "q"),
            lambda c: {"spec": {"hard": {"pods": "10", "requests.cpu": "1"}}}),
    Command("run", lambda c: ["run", "solo", "--image=nginx", "--labels=app=solo", "--env=A=B", "--port=80",
                              "-n", c.ns],
            lambda c: _ns(c, "pods", "solo"),
            lambda c: {"metadata": {"labels": {"app": "solo"}}, "spec": {"containers": [
                {"name": "solo", "image": "nginx", "env": [{"name": "A", "value": "B"}],
                 "ports": [{"containerPort": 80}]}]}},
            protobuf=False),
    Command("expose deployment",
            lambda c: ["expose", "deployment", "web", "--port=80", "--target-port=8080", "--name=web-svc", "-n", c.ns],
            lambda c: _ns(c, "services", "web-svc"),
            lambda c: {"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
            setup=(_deploy,), protobuf=False),
    Command("autoscale deployment",
            lambda c: ["autoscale", "deployment", "web", "--min=2", "--max=5", "--cpu-percent=80", "-n", c.ns],
            lambda c: _ns(c, "horizontalpodautoscalers", "web", "autoscaling/v2"),
            lambda c: {"spec": {"minReplicas": 2, "maxReplicas": 5, "scaleTargetRef": {
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                             "averageUtilization": 80}}}]}},
            setup=(_deploy,)),
    Command("set image", lambda c: ["set", "image", "deployment/web", "nginx=nginx:2", "-n", c.ns], _WEB,
            lambda c: {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}}}},
            setup=(_deploy,), protobuf=False),
    Command("set env", lambda c: ["set", "env", "deployment/web", "FOO=bar", "-n", c.ns], _WEB,
            lambda c: {"spec": {"template": {"spec": {"containers": [
                {"name": "nginx", "env": [{"name": "FOO", "value": "bar"}]}]}}}},
            setup=(_deploy,), protobuf=False),
    Command("scale", lambda c: ["scale", "deployment/web", "--replicas=4", "-n", c.ns], _WEB,
            lambda c: {"spec": {"replicas": 4}}, setup=(_deploy,), protobuf=False),
    Command("label", lambda c: ["label", "deployment/web", "tier=front", "-n", c.ns], _WEB,
            lambda c: {"metadata": {"labels": {"app": "web", "tier": "front"}}}, setup=(_deploy,), protobuf=False),
    Command("annotate", lambda c: ["annotate", "deployment/web", "note=hello there", "-n", c.ns], _WEB,
            lambda c: {"metadata": {"annotations": {"note": "hello there"}}}, setup=(_deploy,), protobuf=False),
    Command("edit", lambda c: ["edit", "deployment/web", "-n", c.ns], _WEB,
            lambda c: {"metadata": {"labels": {"app": "web", "edited": "yes-by-editor"}}, "spec": {"replicas": 7}},
            setup=(_deploy,), protobuf=False),
]

_tags = iter(range(100, 1000))


def matches(expected: Any, actual: Any, at: str = "") -> None:
    """`actual` has everything `expected` has (dicts by key, lists item by item, leaves equal)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{at}: {actual!r} is not an object"
        for key, value in expected.items():
            if value is None:
                assert actual.get(key) is None, f"{at}.{key}: {actual.get(key)!r} is not null or absent"
                continue
            assert key in actual, f"{at}: no {key!r} in {actual!r}"
            matches(value, actual[key], f"{at}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{at}: {actual!r} vs {expected!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            matches(e, a, f"{at}[{i}]")
    else:
        assert actual == expected, f"{at}: {actual!r} != {expected!r}"


class Runner:
    """Runs commands of one kubectl version against the module's server."""

    def __init__(self, version: str, server: ApiServer, kubectl_command: KubectlCommand, files: Files) -> None:
        self.version = version
        self.server = server
        self.kubectl_command = kubectl_command
        self.files = files

    def kubectl(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        # kubectl_command appends --server and --cache-dir: a command's own `-- args` go after them.
        tail = args[args.index("--"):] if "--" in args else []
        head = args[:len(args) - len(tail)]
        with self.kubectl_command(self.version, *head, server=self.server.url) as (argv, base_env):
            return subprocess.run([*argv, *tail], env={**base_env, **(env or {})}, capture_output=True, text=True,
                                  timeout=60, check=False)

    def get(self, path: str) -> Json:
        with urllib.request.urlopen(self.server.url + path, timeout=30) as resp:
            doc: Json = json.loads(resp.read())
            return doc

    def run(self, command: Command) -> tuple[Ctx, Json]:
        """Run `command` in a fresh namespace; the object it left."""
        tag = str(next(_tags))
        ctx = Ctx(ns=f"pb-{tag}", tag=tag, files=self.files)
        made = self.kubectl(["create", "namespace", ctx.ns])
        assert made.returncode == 0, made.stderr
        for step in command.setup:
            done = self.kubectl(step(ctx))
            assert done.returncode == 0, done.stderr
        env = {"KUBE_EDITOR": str(self.files.editor), "EDITOR": str(self.files.editor)}
        result = self.kubectl(command.args(ctx), env)
        assert result.returncode == 0, f"kubectl {self.version} {command.name}: {result.stderr}"
        return ctx, self.get(command.path(ctx))


def _params() -> list[Any]:
    return [pytest.param(version, command, id=f"{version}-{command.name}")
            for version in VERSIONS for command in COMMANDS]


@pytest.mark.parametrize(("version", "command"), _params())
def test_imperative_command(version: str, command: Command, server: ApiServer, kubectl_command: KubectlCommand,
                            files: Files) -> None:
    runner = Runner(version, server, kubectl_command, files)
    ctx, obj = runner.run(command)
    matches(command.expect(ctx), obj)


# ---------------------------------------------------------------------------------- protobuf == JSON


ASSIGNED = ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields")


def comparable(obj: Json, ctx: Ctx) -> Json:
    """The object with its namespace, tag and uid blanked and what the server assigns set aside."""
    text = json.dumps(obj).replace(obj["metadata"]["uid"], "UID").replace(ctx.ns, "NS")
    text = text.replace(f"-{ctx.tag}", "-TAG")
    out: Json = json.loads(text)
    for key in ASSIGNED:
        out["metadata"].pop(key, None)
    spec = out.get("spec")
    if out["kind"] == "Service" and isinstance(spec, dict):
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
        for port in spec.get("ports") or ():
            port.pop("nodePort", None)  # the command asks for a port of its own tag
    return out


PROTOBUF_CREATES = [c for c in COMMANDS if c.protobuf]


@pytest.mark.parametrize("command", PROTOBUF_CREATES, ids=[c.name for c in PROTOBUF_CREATES])
def test_protobuf_create_stores_what_the_json_create_stores(command: Command, server: ApiServer,
                                                             kubectl_command: KubectlCommand, files: Files) -> None:
    """kubectl 1.33 (protobuf) and kubectl 1.30 (JSON) leave the same object for the same command."""
    stored = []
    for version in ("1.30", "1.33"):
        ctx, obj = Runner(version, server, kubectl_command, files).run(command)
        stored.append(comparable(obj, ctx))
    assert stored[1] == stored[0]


def test_kubectl_133_really_sends_protobuf(server: ApiServer, kubectl_command: KubectlCommand, files: Files) -> None:
    """The premise: 1.33's typed creates are protobuf, 1.30's JSON (read from kubectl's own -v=8 log)."""
    for version, expected in (("1.30", "application/json"), ("1.33", "application/vnd.kubernetes.protobuf")):
        runner = Runner(version, server, kubectl_command, files)
        result = runner.kubectl(["create", "configmap", f"probe-{version.replace('.', '')}", "--from-literal=a=b",
                                 "-v=8"])
        assert result.returncode == 0, result.stderr
        sent = [line for line in result.stderr.splitlines() if "Content-Type:" in line]
        assert any(expected in line for line in sent), os.linesep.join(sent)
