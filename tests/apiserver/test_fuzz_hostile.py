"""The hostile-input fuzzer in CI: thousands of generated requests against one apiserver process.

Hypothesis draws requests from `hostilekit.requests` (bodies shaped by the served OpenAPI with
hostile leaves and known-invalid mutations, hostile query parameters, headers, paths and
framing) and sends each as raw bytes over TLS with the token, as a client of the default mesh
would. Every request must be answered, never with a 5xx; a failed write must leave the store
as it was; an invalid write must not be accepted; afterwards the apiserver is the same process,
ready, with bounded memory (`hostilekit.Checker`). `scripts/fuzz` runs the same for longer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from hostilekit import TOKEN, Checker, Client, Finding, Request, requests, seed_objects
from hypothesis import HealthCheck, Phase, given, seed, settings

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, LaunchApiServer

CASES = 2000
SEED = 20_261_127


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, apiserver_launcher: LaunchApiServer) -> Iterator[ApiServer]:
    s = apiserver_launcher(tmp_path_factory.mktemp("fuzz-hostile"), token=TOKEN, tls=True)
    yield s
    s.terminate()


def test_hostile_requests_are_all_answered_with_a_4xx_and_change_nothing(server: ApiServer) -> None:
    loop = asyncio.new_event_loop()
    ctx = server.ssl_context()
    client = Client("127.0.0.1", server.port, ctx)
    try:
        schemas: dict[str, Any] = loop.run_until_complete(seed_objects(client))
        checker = Checker(client, server.proc.pid)
        findings: list[Finding] = []
        seen: set[str] = set()

        # Generation only: the store is state, so a replay is not the same request (no shrinking);
        # a failure shows the request as sent.
        @seed(SEED)
        @settings(max_examples=CASES, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(requests(schemas))
        def hostile(req: Request) -> None:
            found = loop.run_until_complete(checker.check(req))
            seen.add(req.what.split(" ")[0].split(":")[0])
            assert not found, "\n".join(f"{f.what}: {f.request}\n  -> {f.answer}" for f in found)

        hostile()
        findings = loop.run_until_complete(checker.final(lambda: server.proc.poll() is None))
        assert not findings, findings
        assert checker.cases >= CASES
        assert {"schema", "mutation", "path", "framing"} <= seen, seen
        assert not any(code >= 500 or code == 0 for code in checker.codes), checker.codes
    finally:
        loop.run_until_complete(client.close())
        loop.close()
