"""A Helm-style set of manifests applied with `kubectl apply -f dir/`, waited on as a user would.

The test writes one application as a directory of YAML files (Namespace, ServiceAccount,
Secret with `stringData`, ConfigMap, Role, RoleBinding, PVC, Deployment, Service, Ingress,
a headless Service and a StatefulSet with a volumeClaimTemplate, Job, CronJob), applies it
with the oldest and the newest installed kubectl (1.27 and 1.33, `edge_kubectl_version`) on
one shared mesh (two nodes, clock rate 20), each into a namespace of its own, and then checks
what a user checks: the Deployment Available and its pods Running, `kubectl rollout status`
of the StatefulSet, `kubectl wait --for=condition=complete` of the Job, a Job of the CronJob
that has fired and completed, the Secret's `data` (base64 of the `stringData`), the PVCs
Pending. `kubectl delete -f dir/` then removes it all, the namespace with it.

Every deadline is in cluster seconds, turned into kubectl's wall-clock `--timeout`.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from cm_e2e import Story, kubectl_binary, running
from cm_mesh import MeshEnv, start_mesh

from kubemesh.services.model.kinds import (
    CRONJOBS,
    JOBS,
    NAMESPACES,
    PERSISTENTVOLUMECLAIMS,
    PODS,
    SECRETS,
    STATEFULSETS,
    Obj,
)

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module")]

RATE = 20.0
SLACK = 30.0
PASSWORD = "s3cr3t: with a colon & ünïcödé"

MANIFESTS: dict[str, str] = {
    "00-namespace.yaml": """\
apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels:
    app.kubernetes.io/part-of: shop
""",
    "10-serviceaccount.yaml": """\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: shop
  namespace: {ns}
""",
    "11-secret.yaml": """\
apiVersion: v1
kind: Secret
metadata:
  name: shop-db
  namespace: {ns}
type: Opaque
stringData:
  username: admin
  password: "{password}"
""",
    "12-configmap.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-config
  namespace: {ns}
data:
  LOG_LEVEL: info
  app.properties: |
    color=blue
    size=10
""",
    "20-rbac.yaml": """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: shop-reader
  namespace: {ns}
rules:
- apiGroups: [""]
  resources: [configmaps, pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: shop-reader
  namespace: {ns}
subjects:
- kind: ServiceAccount
  name: shop
  namespace: {ns}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: shop-reader
""",
    "30-pvc.yaml": """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: shop-uploads
  namespace: {ns}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
""",
    "40-deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
  labels:
    app.kubernetes.io/name: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: web
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web
    spec:
      serviceAccountName: shop
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - {{containerPort: 80, name: http}}
        envFrom:
        - configMapRef: {{name: shop-config}}
        env:
        - name: DB_PASSWORD
          valueFrom:
            secretKeyRef: {{name: shop-db, key: password}}
        readinessProbe:
          httpGet: {{path: /, port: http}}
        resources:
          requests: {{cpu: 100m, memory: 64Mi}}
        volumeMounts:
        - {{name: uploads, mountPath: /uploads}}
      volumes:
      - name: uploads
        persistentVolumeClaim:
          claimName: shop-uploads
""",
    "41-service.yaml": """\
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {ns}
spec:
  selector:
    app.kubernetes.io/name: web
  ports:
  - {{name: http, port: 80, targetPort: http}}
""",
    "42-ingress.yaml": """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: {ns}
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port: {{name: http}}
""",
    "50-statefulset.yaml": """\
apiVersion: v1
kind: Service
metadata:
  name: db
  namespace: {ns}
spec:
  clusterIP: None
  selector:
    app.kubernetes.io/name: db
  ports:
  - port: 5432
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: {ns}
spec:
  serviceName: db
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: db
  template:
    metadata:
      labels:
        app.kubernetes.io/name: db
    spec:
      containers:
      - name: postgres
        image: postgres:16
        envFrom:
        - secretRef: {{name: shop-db}}
        volumeMounts:
        - {{name: data, mountPath: /var/lib/postgresql/data}}
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: 1Gi
""",
    "60-job.yaml": """\
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  namespace: {ns}
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: busybox:1.36
        command: [sh, -c, "echo migrating"]
""",
    "61-cronjob.yaml": """\
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
  namespace: {ns}
spec:
  schedule: "*/1 * * * *"
  successfulJobsHistoryLimit: 2
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: report
            image: busybox:1.36
            command: [sh, -c, date]
""",
}
OBJECTS = 14
"""Objects in the manifests (the RBAC and StatefulSet files hold two each)."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh_env() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=2, rate=RATE):
        yield env


def write_manifests(folder: Path, ns: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in MANIFESTS.items():
        (folder / name).write_text(text.format(ns=ns, password=PASSWORD), encoding="utf-8")
    return folder


def complete(job: Obj) -> bool:
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


async def test_apply_a_manifest_directory_wait_and_delete(mesh_env: MeshEnv, edge_kubectl_version: str,
                                                          tmp_path: Path) -> None:
    kubectl_binary(edge_kubectl_version)
    s = Story(mesh_env, edge_kubectl_version)
    ns = f"shop-{edge_kubectl_version.replace('.', '-')}"
    folder = write_manifests(tmp_path / "chart", ns)

    out = await s.run("apply", "-f", f"{folder}/")
    lines = out.splitlines()
    assert len(lines) == OBJECTS and all(line.endswith(" created") for line in lines), out
    assert lines[0] == f"namespace/{ns} created", "the files are applied in order, the namespace first"

    # The Deployment: Available, its pods Running (they mount the Pending claim: volumes are not emulated).
    await s.run("-n", ns, "wait", "--for=condition=Available", "deployment/web", f"--timeout={s.timeout(120)}",
                within=120)
    await s.run("-n", ns, "wait", "--for=condition=Ready", "pod", "-l", "app.kubernetes.io/name=web",
                f"--timeout={s.timeout(60)}", within=60)
    web = await s.items(PODS, ns, labels="app.kubernetes.io/name=web")
    assert len(web) == 2 and all(running(p) for p in web), [p.get("status") for p in web]
    assert {p["spec"]["serviceAccountName"] for p in web} == {"shop"}

    # The StatefulSet: its rollout completes, one claim per pod from the volumeClaimTemplate.
    out = await s.run("-n", ns, "rollout", "status", "statefulset/db", f"--timeout={s.timeout(120)}", within=120)
    # The API defaults `updateStrategy.rollingUpdate.partition: 0`, so kubectl words it as partitioned.
    assert "roll out complete: 2 new pods have been updated" in out, out
    sts = await s.get(STATEFULSETS, "db", ns)
    assert sts is not None and sts["status"].get("readyReplicas") == 2, sts
    db = {p["metadata"]["name"]: p for p in await s.items(PODS, ns, labels="app.kubernetes.io/name=db")}
    assert sorted(db) == ["db-0", "db-1"] and all(running(p) for p in db.values())
    for name, pod in db.items():
        mounted = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                  if "persistentVolumeClaim" in v]
        assert mounted == [f"data-{name}"], pod["spec"].get("volumes")

    # The Job completes, as `kubectl wait` sees it.
    out = await s.run("-n", ns, "wait", "--for=condition=complete", "job/migrate", f"--timeout={s.timeout(90)}",
                      within=90)
    assert "job.batch/migrate condition met" in out, out

    # The CronJob fires every minute of the cluster clock: one of its Jobs has completed, and the
    # CronJob controller has recorded it (lastSuccessfulTime comes with its next sync of the
    # CronJob after the Job's completion, so it may trail what this poll sees of the Job).
    async def fired() -> Obj | None:
        cj = await s.get(CRONJOBS, "report", ns)
        ours = [j for j in await s.items(JOBS, ns)
                if any(r.get("kind") == "CronJob" and r.get("name") == "report"
                       for r in j["metadata"].get("ownerReferences") or [])]
        status = (cj or {}).get("status") or {}
        return cj if status.get("lastScheduleTime") and status.get("lastSuccessfulTime") and any(
            complete(j) for j in ours) else None

    cronjob: Obj = await s.until(fired, within=60 + 60 + SLACK,
                                 what="a Job of CronJob report completed and recorded as its last success")
    assert cronjob["status"].get("lastSuccessfulTime"), cronjob["status"]

    # The Secret: data holds the base64 of stringData, which is not stored.
    secret = await s.get(SECRETS, "shop-db", ns)
    assert secret is not None
    assert secret["data"] == {"username": base64.b64encode(b"admin").decode(),
                              "password": base64.b64encode(PASSWORD.encode()).decode()}, secret["data"]
    assert "stringData" not in secret
    shown = await s.run("-n", ns, "get", "secret", "shop-db", "-o", "jsonpath={.data.password}")
    assert base64.b64decode(shown).decode() == PASSWORD

    # The claims exist and stay Pending: kubemesh has no storage provisioner (no PersistentVolume
    # is ever created or bound), so a Pending claim is the correct, expected state here.
    claims = {c["metadata"]["name"]: c for c in await s.items(PERSISTENTVOLUMECLAIMS, ns)}
    assert sorted(claims) == ["data-db-0", "data-db-1", "shop-uploads"], sorted(claims)
    assert {n: (c.get("status") or {}).get("phase") for n, c in claims.items()} == dict.fromkeys(claims, "Pending")
    assert (await s.run("-n", ns, "get", "pvc", "shop-uploads", "-o", "jsonpath={.status.phase}")) == "Pending"

    # Everything the directory names is there, as `kubectl get -f` lists it.
    listed = await s.run("get", "-f", f"{folder}/", "-o", "name")
    assert len(listed.splitlines()) == OBJECTS, listed

    # Clean up the way it was made. The namespace (first file) is deleted first, so the namespace
    # controller may remove a later file's objects before kubectl reaches them: a NotFound there
    # is the upstream race too, hence --ignore-not-found; kubectl then waits for all to be gone.
    out = await s.run("delete", "-f", f"{folder}/", "--ignore-not-found", f"--timeout={s.timeout(180)}",
                      within=180)
    assert f'namespace "{ns}" deleted' in out, out
    assert await s.get(NAMESPACES, ns) is None
    for kind in (PODS, PERSISTENTVOLUMECLAIMS, JOBS, STATEFULSETS):
        assert await s.items(kind, ns) == [], f"{kind.resource} left behind in {ns}"
