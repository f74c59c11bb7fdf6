"""A kopf operator with its admission webhooks, run by tests/clients/test_kopf_webhooks.py in kopf's virtualenv.

kopf serves the webhooks itself (`kopf.WebhookServer` on loopback, with the certificate the test
made) and manages their configurations (`settings.admission.managed`: kopf creates and keeps
`auto.kopf.dev` ValidatingWebhookConfiguration and MutatingWebhookConfiguration with its URL and
`caBundle`), as operator authors ship them. On `Widget`s (`widgets.kopf.clients.kubemesh.io`):

* validating: a widget of size over 10 is refused (`kopf.AdmissionError`);
* mutating: a widget without a message gets one.

Where: `KOPF_WEBHOOK_PORT`, and `KOPF_WEBHOOK_PKI` holding `ca.crt`, `apiserver.crt` and
`apiserver.key` (the names `kubemesh.services.machinery.certs.ensure_certs` writes).
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import os
from typing import Any

import kopf  # type: ignore[import-not-found]

GROUP = "kopf.clients.kubemesh.io"
VERSION = "v1"
PLURAL = "widgets"


@kopf.on.startup()
async def serve_webhooks(settings: Any, **_: Any) -> None:
    pki = os.environ["KOPF_WEBHOOK_PKI"]
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1", host="127.0.0.1", port=int(os.environ["KOPF_WEBHOOK_PORT"]),
        certfile=f"{pki}/apiserver.crt", pkeyfile=f"{pki}/apiserver.key", cafile=f"{pki}/ca.crt")
    settings.admission.managed = "auto.kopf.dev"


@kopf.on.validate(GROUP, VERSION, PLURAL)
def no_huge_widgets(spec: Any, **_: Any) -> None:
    if int(spec.get("size", 0)) > 10:
        raise kopf.AdmissionError("widgets larger than 10 are not allowed")


@kopf.on.mutate(GROUP, VERSION, PLURAL)
def default_message(spec: Any, patch: Any, **_: Any) -> None:
    if not spec.get("message"):
        patch.spec["message"] = "set by the webhook"
