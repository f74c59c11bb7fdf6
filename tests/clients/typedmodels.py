"""Reading responses with the official clients' typed models, as their generated APIs do.

`TypedModels.problems(doc, model)` deserializes one response body (or one watch event's
object) with the `kubernetes` client (37.x: pydantic models; a required field that is absent
or of the wrong type raises) and with `kubernetes_asyncio` (generated models with
`client_side_validation` on: a required field that is absent raises), through the same
private `__deserialize` path their API methods take, and returns what each of them refused,
naming the field by its JSON path (`status.numberReady`). Neither client's error says where
in the object it was: `_locate` walks down the models' `openapi_types` to the innermost part
that still fails.

`model_name(kind)` is the class the clients generate for a served kind (`V1DaemonSet`,
`V2HorizontalPodAutoscaler`, `CoreV1Event`); its list is `<name>List`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

import kubernetes.client as _k8s
import kubernetes_asyncio.client as _ak8s

from kubemesh.services.model.kinds import Kind

# The client packages are only partly annotated: use them untyped.
k8s: Any = _k8s
ak8s: Any = _ak8s

_RENAMED: Final = {("", "Event"): "CoreV1Event"}
"""Kinds whose generated class is not `<Version><Kind>` (two groups have an Event)."""

_LIST: Final = re.compile(r"^(?:List\[|list\[)(.*)\]$")
_DICT: Final = re.compile(r"^(?:Dict\[[^,]*, |dict\([^,]*, )(.*)[\])]$")


def model_name(kind: Kind) -> str:
    """The clients' class for objects of `kind` (`V1DaemonSet`)."""
    return _RENAMED.get((kind.group, kind.kind), f"{kind.version[:1].upper()}{kind.version[1:]}{kind.kind}")


@dataclass(frozen=True)
class Refusal:
    """One client refusing one document."""

    client: str
    model: str
    field: str
    """The JSON path of the innermost part that does not deserialize ("" for the whole)."""
    error: str

    def __str__(self) -> str:
        return f"{self.client} {self.model} at {self.field or '<root>'}: {self.error}"


class TypedModels:
    """Both clients' deserializers, with client-side validation on."""

    def __init__(self) -> None:
        sync_config = k8s.Configuration()
        sync_config.client_side_validation = True
        self._sync = k8s.ApiClient(sync_config)
        async_config = ak8s.Configuration()
        async_config.client_side_validation = True
        # The models the deserializer builds take the default configuration, not the client's:
        # validation must be on there (it is by default; a test that turned it off would blind this one).
        if not ak8s.Configuration.get_default_copy().client_side_validation:
            raise RuntimeError("kubernetes_asyncio's default configuration has client-side validation off")
        self._async = ak8s.ApiClient(configuration=async_config)  # needs a running loop (its connector)
        self._clients: tuple[tuple[str, Any, Any], ...] = (
            ("kubernetes", self._sync._ApiClient__deserialize, k8s.models),
            ("kubernetes_asyncio", self._async._ApiClient__deserialize, ak8s.models),
        )

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        self.close()
        await self._async.close()

    def problems(self, doc: Any, model: str) -> list[Refusal]:
        """What each client refuses when it reads `doc` as `model` (empty: both read it)."""
        out: list[Refusal] = []
        # Each client gets its own copy: a deserializer may keep or alter what it is given.
        text = json.dumps(doc)
        for client, deserialize, models in self._clients:
            try:
                deserialize(json.loads(text), model)
            except Exception as exc:
                path, error = _locate(deserialize, models, json.loads(text), model, "", exc)
                out.append(Refusal(client=client, model=model, field=path, error=error))
        return out


_ATTR: Final = re.compile(r"`(\w+)`")


def _explain(exc: BaseException, klass: Any, path: str) -> tuple[str, str]:
    """(the JSON path of the field `exc` names inside `klass` at `path`, what is wrong with it)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic: each error's loc names the field by its JSON name
        found = [(".".join(str(p) for p in e.get("loc", ())), str(e.get("msg", ""))) for e in errors()]
        fields = [f"{path}.{loc}" if path and loc else (loc or path) for loc, _ in found]
        return ", ".join(fields), "; ".join(f"{loc}: {msg}" for loc, msg in found)
    text = " ".join(str(exc).split())
    m = _ATTR.search(text)
    attribute_map = getattr(klass, "attribute_map", None)
    if m and isinstance(attribute_map, dict) and m.group(1) in attribute_map:
        key = attribute_map[m.group(1)]
        return (f"{path}.{key}" if path else key), f"{type(exc).__name__}: {text[:300]}"
    return path, f"{type(exc).__name__}: {text[:300]}"


def _locate(deserialize: Any, models: Any, data: Any, type_name: str, path: str,
            exc: BaseException) -> tuple[str, str]:
    """The path of the innermost part of `data` that fails as `type_name`, and its error."""
    m = _LIST.match(type_name)
    if m and isinstance(data, list):
        for i, item in enumerate(data):
            failure = _fails(deserialize, item, m.group(1))
            if failure is not None:
                return _locate(deserialize, models, item, m.group(1), f"{path}[{i}]", failure)
        return path, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    m = _DICT.match(type_name)
    if m and isinstance(data, dict):
        for key, item in data.items():
            failure = _fails(deserialize, item, m.group(1))
            if failure is not None:
                return _locate(deserialize, models, item, m.group(1), f"{path}[{key}]", failure)
        return path, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    klass: Any = getattr(models, type_name, None)
    types = getattr(klass, "openapi_types", None)
    if not isinstance(data, dict) or not isinstance(types, dict):
        return _explain(exc, klass, path)
    for attr, sub in types.items():
        key = klass.attribute_map[attr]
        if key in data:
            failure = _fails(deserialize, data[key], sub)
            if failure is not None:
                return _locate(deserialize, models, data[key], sub, f"{path}.{key}" if path else key, failure)
    return _explain(exc, klass, path)


def _fails(deserialize: Any, data: Any, type_name: str) -> BaseException | None:
    try:
        deserialize(json.loads(json.dumps(data)), type_name)
    except Exception as exc:
        return exc
    return None
