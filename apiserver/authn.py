"""Authentication: who a request comes from, and the ServiceAccount tokens the mesh issues.

Identities:

* the mesh's admin token is `kubernetes-admin` in `system:masters` (kubeadm's admin.conf);
  without a configured token every request without a ServiceAccount token is that admin too
  (a mesh started without authentication stays all-powerful, as before RBAC);
* a ServiceAccount token (TokenRequest, `serviceaccounts/<name>/token`) is
  `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts`,
  `system:serviceaccounts:<ns>` and `system:authenticated`.

ServiceAccount tokens are JWTs signed with the mesh's key (HS256: clients treat a bearer token
as opaque, so the algorithm is the mesh's business; upstream signs RS256). A token is bound
to its ServiceAccount's uid, and to a pod's when the request names one, and expires on the
cluster clock: it is refused (401) once expired, once its ServiceAccount (or pod) is deleted,
even if one of the same name was created again, and while a chaos fault rejects its user.
Verified tokens are cached by their text; the expiry and the uids are checked on every request.

Components under their own identities (`component_identities`, on by default; the apiserver's
`--no-component-identities` turns it off): a request with the admin token that says it comes
from a kubemesh component (`X-Kubemesh-Component`) is that component's user, as upstream's
components have their own credentials: the scheduler `system:kube-scheduler`, the
controller-manager `system:kube-controller-manager` for its informers, events and leader
election and, for a request one of its controllers makes (`X-Kubemesh-Controller`), that
controller's ServiceAccount `system:serviceaccount:kube-system:<account>` (upstream's
`--use-service-account-credentials`; `rbacdefaults.CONTROLLER_ACCOUNTS`), a kubelet `system:node:<instance>` (its
node, or the kubelet process for its shared pod watch) in `system:nodes`. Their bootstrap roles
then decide (`kubemesh.apiserver.rbacdefaults`), and for nodes the node authorizer and
NodeRestriction (`kubemesh.apiserver.nodeauth`): a kubelet touches only its own node, lease
and pods, and reads only what its pods refer to.

Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` headers: kubectl's
`--as`, `--as-group`, `--as-uid`) is authorized as upstream: the verb `impersonate` on
`users`, `groups`, `serviceaccounts` (in the ServiceAccount's namespace) or
`uids.authentication.k8s.io`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from kubemesh.apiserver import errors
from kubemesh.apiserver.rbac import ADMIN, AUTHENTICATED, UNAUTHENTICATED, Attributes, Authorizer, User
from kubemesh.apiserver.storage import Store
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.model.kinds import PODS, SERVICEACCOUNTS, Obj

ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES: Final = (ISSUER,)
DEFAULT_EXPIRATION: Final = 3600
MIN_EXPIRATION: Final = 600
SA_PREFIX: Final = "system:serviceaccount:"
KEY_FILE: Final = "sa-signing.key"
ANONYMOUS: Final = User(name="system:anonymous", groups=(UNAUTHENTICATED,))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def service_account_user(namespace: str, name: str, *, uid: str = "",
                         extra: Mapping[str, tuple[str, ...]] | None = None) -> User:
    """The user a ServiceAccount's token authenticates as."""
    return User(name=f"{SA_PREFIX}{namespace}:{name}",
                groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
                uid=uid, extra=dict(extra or {}))


def load_key(data_dir: str | None) -> bytes:
    """The signing key: kept in the data directory (tokens survive a restart), else fresh."""
    if data_dir is None:
        return secrets.token_bytes(32)
    path = Path(data_dir) / KEY_FILE
    if path.exists():
        return bytes.fromhex(path.read_text().strip())
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(key.hex())
    path.chmod(0o600)
    return key


@dataclass(frozen=True, slots=True)
class _Verified:
    user: User
    expires: float
    sa_key: str
    sa_uid: str
    pod_key: str
    pod_uid: str


@dataclass(slots=True)
class Authenticator:
    """Turns a request's bearer token into a `User` (see the module docstring)."""

    store: Store
    clock: Clock
    key: bytes
    admin_token: str | None
    component_identities: bool = True
    """Admin-token requests of kubemesh components act as the components' own users (module docstring)."""
    controller_account: Callable[[str], str] = lambda controller: f"{controller}-controller"
    """The kube-system ServiceAccount a controller-manager controller acts as (the bootstrap roles' table)."""
    anonymous: bool = False
    """`--anonymous-auth`: a request without any bearer token is `system:anonymous` in
    `system:unauthenticated` (RBAC then decides: the health and version paths are open to it),
    as kube-apiserver's default; off (kubemesh's default, as hardened clusters run), it gets 401."""
    rejected: set[str] = field(default_factory=set)
    """Chaos: users whose ServiceAccount tokens are refused (as if expired)."""
    _cache: dict[str, _Verified] = field(default_factory=dict)

    def authenticate(self, authorization: str, *, component: str | None = None,
                     instance: str | None = None, controller: str | None = None) -> User | None:
        """The user of an `Authorization` header; None when it authenticates nobody (401).

        `component`/`instance`/`controller`: the kubemesh component headers (with `component_identities`).
        """
        sent = authorization[7:].strip() if authorization.startswith("Bearer ") else ""
        if self.admin_token is not None and sent and hmac.compare_digest(sent, self.admin_token):
            return self._component(component, instance, controller) if self.component_identities and component \
                else ADMIN
        if sent.count(".") == 2:
            user = self._service_account(sent)
            if user is not None:
                return user
            return None
        if self.admin_token is None:
            return self._component(component, instance, controller) if self.component_identities and component \
                else ADMIN
        if self.anonymous and not authorization:
            return ANONYMOUS
        return None

    def _component(self, component: str | None, instance: str | None, controller: str | None) -> User:
        if component == "scheduler":
            return User(name="system:kube-scheduler", groups=(AUTHENTICATED,))
        if component == "controller_manager":
            if controller:  # upstream's --use-service-account-credentials: each controller its own account
                return service_account_user("kube-system", self.controller_account(controller))
            return User(name="system:kube-controller-manager", groups=(AUTHENTICATED,))
        if component == "kubelet":
            return User(name=f"system:node:{instance or 'unknown'}", groups=("system:nodes", AUTHENTICATED))
        return ADMIN

    def _service_account(self, token: str) -> User | None:
        v = self._cache.get(token)
        if v is None:
            v = self._verify(token)
            if v is None:
                return None
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token] = v
        if self.clock.now() >= v.expires or v.user.name in self.rejected:
            return None
        sa = self.store.get(SERVICEACCOUNTS, v.sa_key)
        if sa is None or sa["metadata"].get("uid") != v.sa_uid:
            return None
        if v.pod_key:
            pod = self.store.get(PODS, v.pod_key)
            if pod is None or pod["metadata"].get("uid") != v.pod_uid:
                return None
        return v.user

    def _verify(self, token: str) -> _Verified | None:
        head, body, sig = token.split(".")
        want = hmac.new(self.key, f"{head}.{body}".encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(_unb64(sig), want):
                return None
            claims = orjson.loads(_unb64(body))
            k8s = claims["kubernetes.io"]
            ns, sa = str(k8s["namespace"]), k8s["serviceaccount"]
            pod = k8s.get("pod") or {}
            extra: dict[str, tuple[str, ...]] = {"authentication.kubernetes.io/credential-id": (
                f"JTI={claims['jti']}",)}
            if pod:
                extra["authentication.kubernetes.io/pod-name"] = (str(pod["name"]),)
                extra["authentication.kubernetes.io/pod-uid"] = (str(pod["uid"]),)
            user = service_account_user(ns, str(sa["name"]), uid=str(sa["uid"]), extra=extra)
            return _Verified(user=user, expires=float(claims["exp"]), sa_key=f"{ns}/{sa['name']}",
                             sa_uid=str(sa["uid"]), pod_key=f"{ns}/{pod['name']}" if pod else "",
                             pod_uid=str(pod.get("uid", "")) if pod else "")
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            return None

    # ------------------------------------------------------------------------------ TokenRequest

    def issue(self, *, sa: Obj, pod: Obj | None, audiences: list[str], seconds: int, jti: str) -> tuple[str, float]:
        """A signed token for ServiceAccount `sa` (bound to `pod` if given) and its expiry (cluster seconds)."""
        now = self.clock.now()
        md = sa["metadata"]
        k8s: Obj = {"namespace": md["namespace"], "serviceaccount": {"name": md["name"], "uid": md["uid"]}}
        if pod is not None:
            k8s["pod"] = {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        exp = int(now) + seconds
        claims = {"aud": audiences, "exp": exp, "iat": int(now), "iss": ISSUER, "jti": jti,
                  "kubernetes.io": k8s, "nbf": int(now), "sub": f"{SA_PREFIX}{md['namespace']}:{md['name']}"}
        head = _b64(orjson.dumps({"alg": "HS256", "kid": hashlib.sha256(self.key).hexdigest()[:16], "typ": "JWT"}))
        body = _b64(orjson.dumps(claims))
        sig = _b64(hmac.new(self.key, f"{head}.{body}".encode(), hashlib.sha256).digest())
        return f"{head}.{body}.{sig}", float(exp)

    def token_request(self, *, sa: Obj, body: Any, jti: str) -> Obj:
        """Answer a TokenRequest for `sa`: 422 for a bad spec, 404 for a bound pod that does not exist."""
        md = sa["metadata"]
        raw_spec = body.get("spec") if isinstance(body, dict) else None
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        seconds = spec.get("expirationSeconds")
        seconds = DEFAULT_EXPIRATION if seconds is None else seconds
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION:
            raise errors.StatusError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{md["name"]}" is invalid: '
                                     f"spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration "
                                     "less than 10 minutes", details={"name": md["name"], "group":
                                                                       "authentication.k8s.io", "kind":
                                                                       "TokenRequest"})
        audiences = [str(a) for a in spec.get("audiences") or []] or list(API_AUDIENCES)
        ref = spec.get("boundObjectRef")
        pod: Obj | None = None
        if isinstance(ref, dict) and ref.get("kind") == "Pod":
            pod = self.store.get(PODS, f"{md['namespace']}/{ref.get('name')}")
            if pod is None:
                raise errors.not_found(PODS, str(ref.get("name")))
            if ref.get("uid") and ref["uid"] != pod["metadata"]["uid"]:
                raise errors.StatusError(409, "Conflict", f'the UID in the bound object reference '
                                         f'({ref["uid"]}) does not match the UID in record. The object might '
                                         "have been deleted and then recreated")
        token, exp = self.issue(sa=sa, pod=pod, audiences=audiences, seconds=seconds, jti=jti)
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": md["name"], "namespace": md["namespace"],
                             "creationTimestamp": format_time(self.clock.now())},
                "spec": {"audiences": audiences, "expirationSeconds": seconds,
                         "boundObjectRef": ref if isinstance(ref, dict) else None},
                "status": {"token": token, "expirationTimestamp": format_time(exp)}}


def impersonate(headers: Mapping[str, str], all_values: list[tuple[str, str]], user: User,
                authorizer: Authorizer) -> User:
    """The user a request acts as: `user`, or whom its Impersonate-* headers name (403 unless allowed)."""
    name = headers.get("Impersonate-User")
    groups = [v for k, v in all_values if k.lower() == "impersonate-group"]
    uid = headers.get("Impersonate-Uid", "")
    extra: dict[str, tuple[str, ...]] = {}
    for k, v in all_values:
        if k.lower().startswith("impersonate-extra-"):
            extra[k[len("impersonate-extra-"):].lower()] = (*extra.get(k[len("impersonate-extra-"):].lower(), ()), v)
    if name is None:
        if groups or uid or extra:
            raise errors.internal("requested [" + ", ".join(f"{{Group  {g}}}" for g in groups)
                                  + "] without impersonating a user")
        return user
    checks: list[Attributes] = []
    if name.startswith(SA_PREFIX) and name.count(":") == 3:
        ns, sa = name[len(SA_PREFIX):].split(":", 1)
        checks.append(Attributes(verb="impersonate", resource="serviceaccounts", namespace=ns, name=sa))
        base = service_account_user(ns, sa)
        implied = [g for g in base.groups if g != AUTHENTICATED]
    else:
        checks.append(Attributes(verb="impersonate", resource="users", name=name))
        implied = []
    checks += [Attributes(verb="impersonate", resource="groups", name=g) for g in groups]
    if uid:
        checks.append(Attributes(verb="impersonate", group="authentication.k8s.io", resource="uids", name=uid))
    checks += [Attributes(verb="impersonate", group="authentication.k8s.io", resource="userextras", subresource=k,
                          name=v) for k, vs in extra.items() for v in vs]
    for a in checks:
        authorizer.check(user, a)
    all_groups = [*implied, *(g for g in groups if g not in implied)]
    if name != "system:anonymous" and AUTHENTICATED not in all_groups:
        all_groups.append(AUTHENTICATED)
    return User(name=name, groups=tuple(all_groups), uid=uid, extra=extra)
