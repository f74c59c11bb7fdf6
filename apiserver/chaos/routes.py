"""The chaos front door over HTTP: `/chaos/v1/...` (JSON, or msgpack with `application/vnd.kubemesh.msgpack`).

    POST   /chaos/v1/faults                create one fault (201); 422 names the field at fault
    GET    /chaos/v1/faults                {"items": [fault...]}
    PUT    /chaos/v1/faults                the desired set {"items": [spec...]}: creates, replaces,
                                           removes; answers what it did
    GET    /chaos/v1/faults/{name}         one fault with its status
    PATCH  /chaos/v1/faults/{name}         merge patch of the spec (name and type are fixed)
    DELETE /chaos/v1/faults/{name}         heal and remove; answers the final fault
    POST   /chaos/v1/faults/{name}/release end (heal) now, keep it listed as Recovered
    POST   /chaos/v1/reset                 heal and remove everything: {"healed": [...], "removed": [...]}
    GET    /chaos/v1/history               {"items", "lastIndex"} (?since=&type=&fault=&limit=),
                                           JSON lines with ?format=jsonl, a live stream with ?follow=true
    GET    /chaos/v1/types                 every fault type with its category
    GET    /chaos/v1/points                the chaos points each registered component declares
    GET    /chaos/v1/leftovers             what chaos still holds (all zeros after a reset)

Changes go through the engine one at a time (`ChaosEngine.lock`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubemesh.apiserver.chaos.engine import ChaosEngine
from kubemesh.apiserver.chaos.faults import fault_not_found
from kubemesh.apiserver.chaos.spec import ONE_SHOT, TYPES
from kubemesh.apiserver.history_routes import history_response
from kubemesh.apiserver.serving import read_body, render


class ChaosRoutes:
    """The handlers of `/chaos/v1`, over one engine."""

    def __init__(self, engine: ChaosEngine) -> None:
        self.engine = engine
    def routes(self) -> list[web.RouteDef]:
        """The `/chaos/v1` routes."""
        return [
            web.get("/chaos/v1/faults", self.h_list),
            web.post("/chaos/v1/faults", self.h_create),
            web.put("/chaos/v1/faults", self.h_apply),
            web.get("/chaos/v1/faults/{name}", self.h_get),
            web.patch("/chaos/v1/faults/{name}", self.h_patch),
            web.delete("/chaos/v1/faults/{name}", self.h_delete),
            web.post("/chaos/v1/faults/{name}/release", self.h_release),
            web.post("/chaos/v1/reset", self.h_reset),
            web.get("/chaos/v1/history", self.h_history),
            web.get("/chaos/v1/types", self.h_types),
            web.get("/chaos/v1/points", self.h_points),
            web.get("/chaos/v1/leftovers", self.h_leftovers),
        ]

    async def _body(self, request: web.Request) -> Any:
        body, _ = await read_body(request)
        return body

    async def h_list(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/faults."""
        return render(request, {"kind": "FaultList", "items": [f.to_dict() for f in self.engine.faults.values()]})

    async def h_create(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/faults."""
        body = await self._body(request)
        async with self.engine.lock:
            f = await self.engine.create(body)
        return render(request, f.to_dict(), status=201)

    async def h_apply(self, request: web.Request) -> web.Response:
        """PUT /chaos/v1/faults."""
        body = await self._body(request)
        async with self.engine.lock:
            out = await self.engine.apply(body)
            items = [f.to_dict() for f in self.engine.faults.values()]
        return render(request, {**out, "items": items})

    async def h_get(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/faults/{name}."""
        f = self.engine.faults.get(request.match_info["name"])
        if f is None:
            raise fault_not_found(request.match_info["name"])
        return render(request, f.to_dict())

    async def h_patch(self, request: web.Request) -> web.Response:
        """PATCH /chaos/v1/faults/{name}."""
        body = await self._body(request)
        async with self.engine.lock:
            f = await self.engine.patch(request.match_info["name"], body)
        return render(request, f.to_dict())

    async def h_delete(self, request: web.Request) -> web.Response:
        """DELETE /chaos/v1/faults/{name}."""
        async with self.engine.lock:
            f = await self.engine.delete(request.match_info["name"])
        return render(request, f.to_dict())

    async def h_release(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/faults/{name}/release."""
        f = self.engine.faults.get(request.match_info["name"])
        if f is None:
            raise fault_not_found(request.match_info["name"])
        async with self.engine.lock:
            await self.engine.end(f, "released")
        return render(request, f.to_dict())

    async def h_reset(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/reset."""
        async with self.engine.lock:
            out = await self.engine.reset()
        return render(request, out)

    async def h_leftovers(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/leftovers: what chaos still holds (all zero after a reset)."""
        return render(request, self.engine.leftovers())

    async def h_types(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/types."""
        return render(request, {"types": [{"type": t, "category": c, "oneShot": t in ONE_SHOT}
                                          for t, c in TYPES.items()]})

    async def h_points(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/points: each registered component's chaos points."""
        out = []
        for inst, e in sorted(self.engine.components.items()):
            url = str(e.get("adminURL") or "").rstrip("/")
            if not url or e.get("component") == "kubelet":
                continue
            res = await self.engine.forwarder.call("GET", f"{url}/chaos/points")
            points = res.body.get("points") if res.outcome == "ok" and isinstance(res.body, dict) else None
            out.append({"instance": inst, "component": e.get("component"), "points": points,
                        **({} if res.outcome == "ok" else {"error": res.detail})})
        return render(request, {"items": out})

    async def h_history(self, request: web.Request) -> web.StreamResponse:
        """GET /chaos/v1/history (see `kubemesh.apiserver.history_routes`)."""
        return await history_response(request, self.engine.history, lines=False)
