"""kubectl 1.27 and 1.33 with a CRD of real-world size (bigcrd.py: ~4,800 YAML lines of nested schema).

Against a real apiserver process over HTTPS with a token, each kubectl with a fresh cache:

* `kubectl apply -f` of the CRD (client-side apply: the last-applied annotation of the whole
  CRD), `kubectl wait --for condition=established`;
* `kubectl apply -f` of an object passes the default validation (`--validate=strict`), is stored
  pruned of nothing and defaulted deep inside lists; an unknown field, a value outside an enum
  and a CEL rule broken are each reported with the field;
* `kubectl get <plural>`, by short name and `-o wide` print the `additionalPrinterColumns`
  (a filter jsonPath among them); `kubectl get all` and `kubectl get <category>` include it;
* `kubectl explain` of `<kind>.spec` and of a field five levels down;
* `kubectl scale <kind>/<name> --replicas=N` goes through `specReplicasPath`;
* `kubectl delete crd` removes the objects and the resource: `kubectl get <plural>` then fails
  with "the server doesn't have a resource type";
* a CRD too big for client-side apply (its annotation over 256 KiB) is refused with the limit,
  as kube-apiserver refuses it, and `kubectl apply --server-side` installs it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from bigcrd import GROUP, KIND, NAME, PLURAL, scraper_crd, to_yaml

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, RunKubectl, StartApiServer

pytestmark = [pytest.mark.kubectl, pytest.mark.slow]

TOKEN = "clients-kubectl-token"
RESOURCE = f"{PLURAL}.{GROUP}"
"""How kubectl names the resource in its messages (`scraper.monitoring...` for one object)."""
ONE = f"{KIND.lower()}.{GROUP}"

GOOD = f"""\
apiVersion: {GROUP}/v1
kind: {KIND}
metadata:
  name: main
  labels: {{team: observability}}
spec:
  version: v2.50.0
  replicas: 2
  shards: 1
  retention: 15d
  logLevel: info
  externalLabels: {{cluster: kubemesh}}
  containers:
  - name: config-reloader
    image: reloader:v1
    args: [--reload-url=http://127.0.0.1:9090/-/reload]
    ports:
    - {{containerPort: 8080, name: reloader-web}}
    env:
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    resources: {{limits: {{cpu: 100m, memory: 50Mi}}, requests: {{cpu: 10m}}}}
    livenessProbe: {{httpGet: {{path: /healthz, port: reloader-web}}}}
    securityContext:
      capabilities: {{drop: [ALL]}}
      seccompProfile: {{type: RuntimeDefault}}
  remoteWrite:
  - url: https://remote.example/api/v1/write
    queueConfig: {{maxShards: 10, batchSendDeadline: 5s}}
    writeRelabelConfigs:
    - {{sourceLabels: [__name__], regex: up, action: keep}}
    basicAuth:
      username: {{name: remote-auth, key: user}}
      password: {{name: remote-auth, key: password}}
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {{matchLabels: {{app: scraper}}}}
  tolerations:
  - {{key: dedicated, operator: Equal, value: monitoring, effect: NoSchedule}}
  storage:
    volumeClaimTemplate:
      spec:
        accessModes: [ReadWriteOnce]
        resources: {{requests: {{storage: 10Gi}}}}
"""


def scraper(name: str, spec: str) -> str:
    return f"apiVersion: {GROUP}/v1\nkind: {KIND}\nmetadata: {{name: {name}}}\nspec: {spec}\n"


class Kubectl:
    """One kubectl version against one server; every run in a worker thread (the server is another process)."""

    def __init__(self, run: RunKubectl, version: str, server: ApiServer, workdir: Path) -> None:
        self.run_kubectl = run
        self.version = version
        self.server = server
        self.workdir = workdir

    async def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.run_kubectl, self.version, *args, server=self.server.url,
                                       token=self.server.token, ca=self.server.ca, input=input, timeout=120)

    async def ok(self, *args: str, input: str | None = None) -> str:
        """kubectl `args`; its stdout. Fails the test on a non-zero exit."""
        r = await self.run(*args, input=input)
        assert r.returncode == 0, f"kubectl {self.version} {' '.join(args)} exited {r.returncode}:\n{r.stderr}"
        return r.stdout

    async def fails(self, *args: str, input: str | None = None) -> str:
        """kubectl `args`, which must fail; its stderr."""
        r = await self.run(*args, input=input)
        assert r.returncode != 0, f"kubectl {self.version} {' '.join(args)} succeeded:\n{r.stdout}"
        return r.stderr

    def file(self, name: str, text: str) -> str:
        path = self.workdir / name
        path.write_text(text)
        return str(path)


@pytest.fixture
async def kc(start_apiserver: StartApiServer, kubectl: RunKubectl, edge_kubectl_version: str,
             tmp_path: Path) -> Kubectl:
    server = await start_apiserver(tls=True, token=TOKEN)
    return Kubectl(kubectl, edge_kubectl_version, server, tmp_path)


async def install_crd(kc: Kubectl) -> None:
    crd_yaml = to_yaml(scraper_crd())
    assert len(crd_yaml.splitlines()) > 4000 and crd_yaml.count("properties:") > 200
    out = await kc.ok("apply", "-f", kc.file("crd.yaml", crd_yaml))
    assert out.strip() == f"customresourcedefinition.apiextensions.k8s.io/{NAME} created"
    out = await kc.ok("wait", "--for", "condition=established", f"crd/{NAME}", "--timeout=60s")
    assert out.strip() == f"customresourcedefinition.apiextensions.k8s.io/{NAME} condition met"


def columns(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


async def test_kubectl_drives_a_large_crd(kc: Kubectl) -> None:
    await install_crd(kc)
    # The CRD round-trips: kubectl reads back what it applied (its annotation included).
    crd = json.loads(await kc.ok("get", "crd", NAME, "-o", "json"))
    assert "kubectl.kubernetes.io/last-applied-configuration" in crd["metadata"]["annotations"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema == scraper_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    # Default validation (--validate=strict) passes for a valid object, and defaults are applied deep down.
    out = await kc.ok("apply", "-f", kc.file("good.yaml", GOOD))
    assert out.strip() == f"{ONE}/main created"
    obj = json.loads(await kc.ok("get", PLURAL, "main", "-o", "json"))
    spec = obj["spec"]
    assert spec["scrapeInterval"] == "30s"
    container = spec["containers"][0]
    assert container["ports"] == [{"containerPort": 8080, "name": "reloader-web", "protocol": "TCP"}]
    assert container["livenessProbe"]["periodSeconds"] == 10
    assert container["env"][0]["valueFrom"]["fieldRef"] == {"apiVersion": "v1", "fieldPath": "metadata.name"}
    assert spec["remoteWrite"][0]["writeRelabelConfigs"][0]["action"] == "keep"
    # Applying the same file again writes nothing. (kubectl says "configured": its three-way JSON
    # merge patch replaces whole lists, and the lists in the server's copy carry defaults.)
    out = await kc.ok("apply", "-f", kc.file("good.yaml", GOOD))
    assert out.strip() in (f"{ONE}/main configured", f"{ONE}/main unchanged")
    again = json.loads(await kc.ok("get", PLURAL, "main", "-o", "json"))
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == 1

    # A bad field is reported, with its path: unknown, outside an enum, against a CEL rule.
    err = await kc.fails("apply", "-f", kc.file("unknown.yaml", scraper("bad1", "{replicas: 1, bogusField: 1}")))
    assert 'unknown field "spec.bogusField"' in err, err
    err = await kc.fails("apply", "-f", kc.file("enum.yaml", scraper("bad2", "{logLevel: loud}")))
    assert "spec.logLevel" in err and 'Unsupported value: "loud"' in err, err
    err = await kc.fails("apply", "-f", kc.file("nested.yaml", scraper(
        "bad3", "{containers: [{name: c, imagePullPolicy: Sometimes, ports: [{containerPort: 70000}]}]}")))
    assert "spec.containers[0].imagePullPolicy" in err and "spec.containers[0].ports[0].containerPort" in err, err
    err = await kc.fails("apply", "-f", kc.file("cel.yaml", scraper("bad4", "{replicas: 60}")))
    assert "at most 50 replicas" in err, err
    assert (await kc.ok("get", PLURAL, "-o", "name")).split() == [f"{ONE}/main"]

    # Status through the status subresource, then the printer columns, by plural and by short name.
    await kc.ok("patch", PLURAL, "main", "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"availableReplicas": 2, "replicas": 2, "selector": "app=scraper", "paused": False,
                    "conditions": [{"type": "Available", "status": "True",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"},
                                   {"type": "Reconciled", "status": "True",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    for what in (PLURAL, "scr", RESOURCE):
        rows = columns(await kc.ok("get", what))
        assert rows[0] == ["NAME", "VERSION", "DESIRED", "READY", "RECONCILED", "AGE"], rows
        assert rows[1][:5] == ["main", "v2.50.0", "2", "2", "True"], rows
    rows = columns(await kc.ok("get", "scr", "main", "-o", "wide"))
    assert rows[0] == ["NAME", "VERSION", "DESIRED", "READY", "RECONCILED", "PAUSED", "AGE"], rows
    assert rows[1][:6] == ["main", "v2.50.0", "2", "2", "True", "false"], rows

    # Its categories: `all` and `monitoring`.
    assert f"{ONE}/main" in (await kc.ok("get", "all")).split()
    assert f"{ONE}/main" in (await kc.ok("get", "monitoring", "-o", "name")).split()

    # explain: the spec, and a field five levels down.
    out = await kc.ok("explain", f"{PLURAL}.spec")
    assert KIND in out and "remoteWrite" in out and "<[]Object>" in out and "The desired state of the scraper" in out
    out = await kc.ok("explain", f"{KIND.lower()}.spec.remoteWrite.queueConfig.maxShards")
    assert "<integer>" in out and "The maximum shards" in out, out
    out = await kc.ok("explain", f"{PLURAL}.spec.containers.livenessProbe.httpGet")
    assert "port" in out and "The HTTP request to perform" in out, out

    # scale through specReplicasPath (with the precondition on the current replicas).
    out = await kc.ok("scale", f"{KIND.lower()}/main", "--current-replicas=2", "--replicas=3")
    assert out.strip() == f"{ONE}/main scaled"
    assert await kc.ok("get", PLURAL, "main", "-o", "jsonpath={.spec.replicas}") == "3"
    err = await kc.fails("scale", f"{KIND.lower()}/main", "--current-replicas=2", "--replicas=4")
    assert "Expected replicas to be 2, was 3" in err, err


async def test_kubectl_delete_crd_and_server_side_apply_of_a_huge_one(kc: Kubectl) -> None:
    await install_crd(kc)
    await kc.ok("apply", "-f", kc.file("good.yaml", GOOD))
    await kc.ok("create", "-f", kc.file("second.yaml", scraper("second", "{replicas: 1}")))
    assert len((await kc.ok("get", "scr", "-o", "name")).split()) == 2

    out = await kc.ok("delete", "crd", NAME)
    assert out.strip() == f'customresourcedefinition.apiextensions.k8s.io "{NAME}" deleted'
    err = await kc.fails("get", PLURAL)
    assert f'the server doesn\'t have a resource type "{PLURAL}"' in err, err
    err = await kc.fails("get", "scr")
    assert 'the server doesn\'t have a resource type "scr"' in err, err
    assert NAME not in await kc.ok("get", "crd", "-o", "name")

    # Recreated, the resource starts empty: the old objects went with the CRD.
    await install_crd(kc)
    assert (await kc.ok("get", PLURAL, "-o", "name")).strip() == ""
    await kc.ok("delete", "crd", NAME)

    # Too big for the last-applied annotation (kube-apiserver's 256 KiB limit on annotations) ...
    huge = to_yaml(scraper_crd(pad=6))
    path = kc.file("huge.yaml", huge)
    assert len(json.dumps(scraper_crd(pad=6), separators=(",", ":"))) > 262144
    err = await kc.fails("apply", "-f", path)
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in err, err
    # ... which `kubectl apply --server-side` does not write.
    out = await kc.ok("apply", "--server-side", "-f", path)
    assert out.strip() == f"customresourcedefinition.apiextensions.k8s.io/{NAME} serverside-applied"
    await kc.ok("wait", "--for", "condition=established", f"crd/{NAME}", "--timeout=60s")
    out = await kc.ok("explain", f"{PLURAL}.spec.extension005.sidecar.securityContext.seccompProfile")
    assert "localhostProfile" in out, out
    await kc.ok("apply", "--server-side", "-f", kc.file("good.yaml", GOOD))
    assert (await kc.ok("get", PLURAL, "-o", "name")).split() == [f"{ONE}/main"]
