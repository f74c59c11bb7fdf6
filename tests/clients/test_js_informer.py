"""The official JavaScript client, @kubernetes/client-node, with its informer on a custom resource.

`js/informer.mjs` runs under the Node.js and node_modules that scripts/clients-setup installs
from `js/package-lock.json`, with KUBECONFIG naming a real mesh (HTTPS, token). Its informer
(`makeInformer`) lists the resource, then watches it: the test checks, from what the script
prints, that it sees the object that existed before as an add, then every add, update
(spec and status) and delete made by another client (kubernetes_asyncio) and by its own
`CustomObjectsApi` (create, merge patch, status patch, delete), in order, with the
resourceVersions the writes returned, and that its cache ends up holding exactly what the
server holds. No error event may appear.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clientkit import Child, Json, ak8s, client_tools, k8s_api, kubeconfig_env, start_mesh
from waits import eventually

from kubemesh.services.mesh.launching import Mesh

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

GROUP = "js.clients.kubemesh.io"
VERSION = "v1"
PLURAL = "widgets"
KIND = "Widget"
NS = "default"
MERGE = "application/merge-patch+json"
WAIT = 30.0
"""Wall seconds to wait for one thing the informer should print."""

CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"plural": PLURAL, "singular": "widget", "kind": KIND},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {
                               "type": "object",
                               "properties": {"spec": {"type": "object", "required": ["size"],
                                                       "properties": {"size": {"type": "integer"}}},
                                              "status": {"type": "object",
                                                         "properties": {"phase": {"type": "string"}}}}}}}]},
}


def widget(name: str, size: int) -> Json:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}, "spec": {"size": size}}


@dataclass
class Informer:
    """The running script: its events, parsed, and a way to send it commands."""

    child: Child

    def events(self, start: int = 0) -> list[Json]:
        out = []
        for line in self.child.lines[start:]:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a warning Node.js printed
            if isinstance(event, dict):
                out.append(event)
        return out

    async def wait(self, what: str, **fields: Any) -> Json:
        """The first event (in order) with these fields; fails after WAIT seconds."""

        def match(line: str) -> bool:
            try:
                event = json.loads(line)
            except ValueError:
                return False
            return isinstance(event, dict) and all(event.get(k) == v for k, v in fields.items())

        index = await self.child.wait_line(match, within=WAIT, what=what)
        event: Json = json.loads(self.child.lines[index])
        return event

    async def command(self, line: str) -> Json:
        """Send a command; its `done` answer (fails on a `failed` one)."""
        start = len(self.child.lines)
        await self.child.send(line)
        word = line.split(maxsplit=1)[0]
        index = await self.child.wait_line(
            lambda text: '"command"' in text and json.loads(text).get("command") == word, within=WAIT,
            what=f"the answer to {line!r}", start=start)
        answer: Json = json.loads(self.child.lines[index])
        assert answer["event"] == "done", f"{line!r} failed in the JS client: {answer}"
        return answer


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with start_mesh() as m:
        yield m


@pytest.fixture
async def informer(mesh: Mesh, tmp_path: Path) -> AsyncIterator[Informer]:
    tools = client_tools()
    async with k8s_api(mesh.kubeconfig_path) as api:
        ext = ak8s.ApiextensionsV1Api(api)
        await ext.create_custom_resource_definition(CRD)

        async def established() -> bool:
            crd = await ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        await eventually(established, within=WAIT, what=f"{PLURAL} Established")
        await ak8s.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                                         widget("before", 1))
    child = Child(argv=[str(tools.node), str(tools.js_dir / "informer.mjs"), GROUP, VERSION, NS, PLURAL, KIND],
                  log_path=tmp_path / "informer.log", env=kubeconfig_env(mesh.kubeconfig_path),
                  cwd=tools.js_dir)
    await child.start()
    try:
        yield Informer(child)
    finally:
        await child.stop()


async def test_informer_sees_every_change_of_a_custom_resource(mesh: Mesh, informer: Informer) -> None:
    started = await informer.wait("the informer's first list", event="started")
    assert started["names"] == ["before"]
    first = informer.events()
    assert [(e["event"], e.get("name")) for e in first if e["event"] in ("add", "update", "delete")] == [
        ("add", "before")], first

    async with k8s_api(mesh.kubeconfig_path) as api:
        co = ak8s.CustomObjectsApi(api)
        # Another client's writes.
        created = await co.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, widget("w1", 2))
        added = await informer.wait("add of w1", event="add", name="w1")
        assert added["spec"] == {"size": 2}
        assert added["resourceVersion"] == created["metadata"]["resourceVersion"]

        patched = await co.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "w1", {"spec": {"size": 3}},
                                                          _content_type=MERGE)
        updated = await informer.wait("update of w1", event="update", name="w1",
                                      resourceVersion=patched["metadata"]["resourceVersion"])
        assert updated["spec"] == {"size": 3}

        status = await co.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "w1",
                                                                {"status": {"phase": "Ready"}}, _content_type=MERGE)
        updated = await informer.wait("status update of w1", event="update", name="w1",
                                      resourceVersion=status["metadata"]["resourceVersion"])
        assert updated["status"] == {"phase": "Ready"} and updated["spec"] == {"size": 3}

        await co.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "w1")
        deleted = await informer.wait("delete of w1", event="delete", name="w1")
        assert deleted["spec"] == {"size": 3}

        # The JS client's own CustomObjectsApi: create, merge patch, status patch, delete.
        made = await informer.command("create js1 4")
        assert (await informer.wait("add of js1", event="add", name="js1"))["resourceVersion"] == \
            made["resourceVersion"]
        got = await co.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "js1")
        assert got["spec"] == {"size": 4}
        made = await informer.command("patch js1 5")
        assert made["spec"] == {"size": 5}
        await informer.wait("update of js1", event="update", name="js1", resourceVersion=made["resourceVersion"])
        made = await informer.command("status js1 Done")
        assert made["status"] == {"phase": "Done"} and made["spec"] == {"size": 5}
        await informer.wait("status update of js1", event="update", name="js1",
                            resourceVersion=made["resourceVersion"])
        await informer.command("delete js1")
        await informer.wait("delete of js1", event="delete", name="js1")

        # The cache holds exactly what the server holds.
        listed = await co.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
        cache = await informer.command("list")
        assert cache["names"] == sorted(i["metadata"]["name"] for i in listed["items"]) == ["before"]

    changes = [(e["event"], e["name"]) for e in informer.events() if e["event"] in ("add", "update", "delete")]
    assert changes == [("add", "before"), ("add", "w1"), ("update", "w1"), ("update", "w1"), ("delete", "w1"),
                       ("add", "js1"), ("update", "js1"), ("update", "js1"), ("delete", "js1")], changes
    errors = [e for e in informer.events() if e["event"] in ("error", "failed")]
    assert errors == [], errors
    await informer.child.send("stop")
    assert await informer.child.exited(within=WAIT) == 0, informer.child.output()
