"""The apiserver's answers stay the same while its write path is rewritten for speed (issue #26).

A corpus of requests over every kind the apiserver serves (one sample each from
`tests/kindsamples.py`): create in JSON, get in JSON and in msgpack, a merge patch in JSON, a
replace sent and answered in msgpack, and the list of the kind. Each answer is decoded, its
volatile values (uids, timestamps, resourceVersions) replaced by placeholders, and compared,
keys in the order the server wrote them, with `golden/response_corpus.jsonl`: any change to
a body, a status code, a field's order or the msgpack form of an object is a failure that
names the kind, the request and the first difference.

When a change of the answers is intended, regenerate the file and commit it with the change:
`KUBEMESH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/apiserver/test_response_corpus.py`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Final

import aiohttp
import msgpack
import pytest
from kindsamples import sample, unscheduled_pod

from kubemesh.services.model.kinds import (
    BINDINGS,
    KINDS,
    MUTATINGWEBHOOKCONFIGURATIONS,
    NAMESPACES,
    PODS,
    REVIEWS,
    VALIDATINGWEBHOOKCONFIGURATIONS,
    Kind,
)

GOLDEN: Final = Path(__file__).parent / "golden" / "response_corpus.jsonl"
NS: Final = "corpus"
JSON_CT: Final = "application/json"
MSGPACK_CT: Final = "application/vnd.kubemesh.msgpack"
_TIME: Final = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_UID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_VOLATILE_KEYS: Final = frozenset({"resourceVersion", "uid", "continue"})


def normalize(value: Any) -> Any:
    """`value` with uids, times and resourceVersions replaced by placeholders, key order kept."""
    if isinstance(value, dict):
        return {k: (f"<{k}>" if k in _VOLATILE_KEYS and isinstance(v, str) and v else normalize(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        if _TIME.match(value):
            return "<time>"
        if _UID.match(value):
            return "<uid>"
    return value


def _walked() -> list[Kind]:
    # The namespace first; webhook configurations last (their samples would otherwise see the
    # later writes); no custom resources (their kinds are made at run time).
    last = {MUTATINGWEBHOOKCONFIGURATIONS, VALIDATINGWEBHOOKCONFIGURATIONS}
    return sorted(KINDS, key=lambda k: (k is not NAMESPACES, k in last, k.api_version, k.kind))


def _url(kind: Kind, name: str | None = None) -> str:
    path = f"{kind.prefix}/namespaces/{NS}/{kind.plural}" if kind.namespaced else f"{kind.prefix}/{kind.plural}"
    return f"{path}/{name}" if name else path


class Corpus:
    """Requests whose normalized answers are collected as corpus lines."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base
        self.lines: list[dict[str, Any]] = []

    async def call(self, what: str, method: str, path: str, body: Any = None, *, ctype: str = JSON_CT,
                   accept: str = JSON_CT) -> Any:
        data = None
        if body is not None:
            data = msgpack.packb(body, use_bin_type=True) if ctype == MSGPACK_CT else json.dumps(body).encode()
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = ctype
        async with self.session.request(method, self.base + path, data=data, headers=headers) as resp:
            raw = await resp.read()
            status = resp.status
            got_ct = resp.headers.get("Content-Type", "").split(";")[0]
        doc = msgpack.unpackb(raw, raw=False) if got_ct == MSGPACK_CT else json.loads(raw)
        self.lines.append({"request": what, "status": status, "contentType": got_ct, "body": normalize(doc)})
        return doc


async def test_answers_match_the_golden_corpus(start_apiserver: Any) -> None:
    server = await start_apiserver(seed=26, extra_args=("--no-system-pods",))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        corpus = Corpus(session, server.url)
        for kind in _walked():
            manifest = sample(kind, NS)
            label = f"{kind.api_version} {kind.kind}"
            created = await corpus.call(f"{label} create", "POST", _url(kind), manifest)
            if kind is NAMESPACES:  # the pod the Binding sample binds
                await corpus.call("unscheduled pod create", "POST", _url(PODS), unscheduled_pod(NS))
            if kind in REVIEWS or kind is BINDINGS:
                continue
            name = manifest["metadata"]["name"]
            assert isinstance(created, dict) and created.get("kind") != "Status", (label, created.get("message"))
            await corpus.call(f"{label} get json", "GET", _url(kind, name))
            await corpus.call(f"{label} get msgpack", "GET", _url(kind, name), accept=MSGPACK_CT)
            patched = await corpus.call(f"{label} merge patch", "PATCH", _url(kind, name),
                                        {"metadata": {"labels": {"corpus": "patched"}}},
                                        ctype="application/merge-patch+json")
            patched["metadata"].setdefault("annotations", {})["corpus"] = "replaced"
            await corpus.call(f"{label} replace msgpack", "PUT", _url(kind, name), patched,
                              ctype=MSGPACK_CT, accept=MSGPACK_CT)
            await corpus.call(f"{label} list", "GET", _url(kind))
    text = "".join(json.dumps(line) + "\n" for line in corpus.lines)
    if os.environ.get("KUBEMESH_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
        pytest.skip(f"wrote {GOLDEN} ({len(corpus.lines)} answers)")
    expected = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    got = [json.loads(line) for line in text.splitlines()]
    assert [e["request"] for e in expected] == [g["request"] for g in got], "the corpus's requests changed"
    for want, have in zip(expected, got, strict=True):
        if want != have or list(_paths(want)) != list(_paths(have)):
            raise AssertionError(f"{have['request']}: the answer changed; first difference at "
                                 f"{_first_difference(want, have)}")
    assert len(got) > 5 * len(KINDS) // 2


def _paths(value: Any, prefix: str = "") -> Any:
    """Every key path in document order (so that a change of key order is a difference too)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{prefix}.{k}"
            yield from _paths(v, f"{prefix}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, f"{prefix}[{i}]")


def _first_difference(want: Any, have: Any, path: str = "") -> str:
    if isinstance(want, dict) and isinstance(have, dict):
        if list(want) != list(have):
            return f"{path or '.'}: keys {list(want)} became {list(have)}"
        for k in want:
            if want[k] != have[k] or list(_paths(want[k])) != list(_paths(have[k])):
                return _first_difference(want[k], have[k], f"{path}.{k}")
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        for i, (a, b) in enumerate(zip(want, have, strict=True)):
            if a != b or list(_paths(a)) != list(_paths(b)):
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path or '.'}: {json.dumps(want)[:300]} became {json.dumps(have)[:300]}"
