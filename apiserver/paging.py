"""List pagination (`limit` and `continue`), consistent at the revision of the list's first page.

Kubernetes pages a list by key. The first page is read at the current revision R; its continue
token says "at R, from the key after the last one returned". Every later page is read at R again,
not at whatever revision is current when it is asked for, so a client paging through a list
sees one snapshot even with writes in between. kube-apiserver reads R from etcd's MVCC history;
here the watch window is that history (`WatchHub.state_at` undoes the window's events after R).
Once R has left the window the token has expired: 410 Expired, whose `metadata.continue` carries
a token that goes on from the same key at the current revision (an inconsistent list, as
upstream's).

Guarantees:

* Keys are `namespace/name` (a cluster-scoped object's is its name) and pages are in key order,
  the order of etcd's keys; the pages of one list, put together, hold every object of the list at
  R exactly once.
* A page holds at most `limit` items. `metadata.remainingItemCount` is the number of items after
  the page, set only when the list has no label or field selector (as upstream, which counts it
  from the key range).
* A token that does not decode is a 400 `invalid continue token: ...`; tokens are opaque to
  clients, but their format is upstream's (base64url of `{"v", "rv", "start"}`), so a token from
  kube-apiserver's documentation decodes here too.
* Snapshots are memoised by (resource, revision, namespace, selectors), a few at a time: paging
  50,000 objects 500 at a time filters and sorts them once, not a hundred times. A memo can never
  be stale: objects are never changed in place and the revision names the state.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from kubemesh.apiserver import errors
from kubemesh.services.model.kinds import Obj

TOKEN_VERSION: Final = "meta.k8s.io/v1"
LATEST: Final = -1
"""The revision of an inconsistent token: go on at whatever revision is current."""

EXPIRED_MESSAGE: Final = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list.")


def key_of(obj: Obj) -> str:
    """The object's key within its resource: `namespace/name`, or the name when cluster-scoped."""
    md = obj["metadata"]
    ns = md.get("namespace")
    return f"{ns}/{md['name']}" if ns else str(md["name"])


@dataclass(frozen=True, slots=True)
class Continue:
    """A decoded continue token: the revision to read at (`LATEST`: the current one) and the first key."""

    rv: int
    start: str

    def encode(self) -> str:
        """The token as clients carry it."""
        raw = orjson.dumps({"v": TOKEN_VERSION, "rv": self.rv, "start": self.start})
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    @classmethod
    def decode(cls, token: str) -> Continue:
        """The token's content; 400 BadRequest when it is not one this server (or upstream) issues."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            data = orjson.loads(raw)
        except (binascii.Error, ValueError, orjson.JSONDecodeError):
            raise errors.bad_request("invalid continue token: continue key is not valid: illegal base64 data or "
                                     "JSON") from None
        if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION:
            version = data.get("v") if isinstance(data, dict) else None
            raise errors.bad_request(f"invalid continue token: continue key is not valid: server does not "
                                     f"recognize this encoded version {version!r}")
        rv, start = data.get("rv"), data.get("start")
        if not isinstance(rv, int) or isinstance(rv, bool) or rv == 0 or not isinstance(start, str) or not start:
            raise errors.bad_request("invalid continue token: continue key is not valid: incorrect encoded start "
                                     "resourceVersion (version meta.k8s.io/v1)")
        return cls(rv=rv if rv > 0 else LATEST, start=start)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: its items, the token for the next page (None: the last) and what remains."""

    items: list[Obj]
    continue_token: str | None
    remaining: int


def page(snapshot: Sequence[Obj], keys: Sequence[str], *, rv: int, start: str | None, limit: int) -> Page:
    """The page of `limit` items from key `start` (inclusive) of a snapshot sorted by key."""
    first = bisect.bisect_left(keys, start) if start else 0
    end = len(snapshot) if limit <= 0 else min(len(snapshot), first + limit)
    items = list(snapshot[first:end])
    if end >= len(snapshot):
        return Page(items=items, continue_token=None, remaining=0)
    # Upstream's next key: the last key returned with a NUL appended, the smallest key after it.
    token = Continue(rv=rv, start=keys[end - 1] + "\x00").encode()
    return Page(items=items, continue_token=token, remaining=len(snapshot) - end)


SNAPSHOTS: Final = 8
"""How many list snapshots `Snapshots` keeps."""


class Snapshots:
    """A few sorted list snapshots, memoised by what names them (see the module docstring)."""

    def __init__(self, *, size: int = SNAPSHOTS) -> None:
        self._size = size
        self._memo: OrderedDict[tuple[str, ...], tuple[list[Obj], list[str]]] = OrderedDict()

    def __contains__(self, name: tuple[str, ...]) -> bool:
        return name in self._memo

    def put(self, name: tuple[str, ...], items: list[Obj]) -> None:
        """Memoise `items` (sorted here) as the snapshot named `name`."""
        self._memo.pop(name, None)
        self.get(name, lambda: items)

    def get(self, name: tuple[str, ...], build: Callable[[], list[Obj]]) -> tuple[list[Obj], list[str]]:
        """The snapshot named `name` (built by `build`, then sorted by key, if it is not memoised)."""
        hit = self._memo.get(name)
        if hit is not None:
            self._memo.move_to_end(name)
            return hit
        pairs = sorted(((key_of(o), o) for o in build()), key=lambda p: p[0])
        entry = ([o for _, o in pairs], [k for k, _ in pairs])
        self._memo[name] = entry
        while len(self._memo) > self._size:
            self._memo.popitem(last=False)
        return entry
