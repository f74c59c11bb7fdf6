"""A CustomResourceDefinition of real-world size, generated: thousands of lines of nested schema.

Operators' CRDs (a monitoring stack's, a certificate manager's) inline whole PodSpec fragments
(containers, probes, affinity, volumes), TLS and auth blocks and label selectors into one
`openAPIV3Schema`, with a description on every field; they run to thousands of YAML lines. This
module builds one of that shape from small builders (nothing copied from an upstream CRD):
`Scraper` (`scrapers.monitoring.clients.kubemesh.io`, short name `scr`, categories `all` and
`monitoring`), namespaced, with status and scale subresources, printer columns (a filter
jsonPath among them), list-map keys, int-or-string fields, formats, patterns, enums, defaults
and CEL rules.

`scraper_crd(pad=N)` adds `N` generated "extension" sections to the spec, to make a CRD big
enough for the 256 KiB annotation limit that client-side `kubectl apply` runs into.
"""

from __future__ import annotations

from typing import Any

import yaml

Json = dict[str, Any]

GROUP = "monitoring.clients.kubemesh.io"
KIND = "Scraper"
PLURAL = "scrapers"
NAME = f"{PLURAL}.{GROUP}"
VERSION = "v1"
ATOMIC_MAP: Json = {"x-kubernetes-map-type": "atomic"}
ATOMIC_LIST: Json = {"x-kubernetes-list-type": "atomic"}
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"


# ---------------------------------------------------------------------------------- builders


def _describe(what: str, more: str = "") -> str:
    return f"{what[0].upper()}{what[1:]} (generated field). {more}".strip()


def string(what: str, **extra: Any) -> Json:
    return {"type": "string", "description": _describe(what), **extra}


def integer(what: str, **extra: Any) -> Json:
    return {"type": "integer", "description": _describe(what), **extra}


def int64(what: str, **extra: Any) -> Json:
    return integer(what, format="int64", **extra)


def int32(what: str, **extra: Any) -> Json:
    return integer(what, format="int32", **extra)


def boolean(what: str, **extra: Any) -> Json:
    return {"type": "boolean", "description": _describe(what), **extra}


def int_or_string(what: str) -> Json:
    return {"description": _describe(what), "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True}


def quantity(what: str) -> Json:
    return {**int_or_string(what), "pattern": QUANTITY}


def duration(what: str, **extra: Any) -> Json:
    return string(what, **extra, pattern=DURATION)


def array(what: str, items: Json, **extra: Any) -> Json:
    return {"type": "array", "description": _describe(what), "items": items, **extra}


def strings(what: str) -> Json:
    return array(what, {"type": "string"}, **ATOMIC_LIST)


def string_map(what: str) -> Json:
    return {"type": "object", "description": _describe(what), "additionalProperties": {"type": "string"}}


def obj(what: str, properties: Json, *, required: list[str] | None = None, **extra: Any) -> Json:
    out: Json = {"type": "object", "description": _describe(what), "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def list_map(what: str, item: Json, *keys: str) -> Json:
    return array(what, item, **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)})


# ---------------------------------------------------------------------------------- pod fragments


def key_selector(what: str, *, key: bool = True) -> Json:
    props: Json = {"name": string("name of the referent", default=""),
                   "optional": boolean("whether the referent must be defined")}
    if key:
        props["key"] = string("the key to select")
    return obj(what, props, required=["key"] if key else None, **ATOMIC_MAP)


def label_selector(what: str) -> Json:
    requirement = obj("a label selector requirement", {
        "key": string("the label key that the selector applies to"),
        "operator": string("a key's relationship to a set of values", enum=["In", "NotIn", "Exists", "DoesNotExist"]),
        "values": strings("an array of string values"),
    }, required=["key", "operator"])
    return obj(what, {
        "matchExpressions": array("a list of label selector requirements", requirement,
                                  **ATOMIC_LIST),
        "matchLabels": string_map("a map of {key,value} pairs"),
    }, **ATOMIC_MAP)


def node_selector_term(what: str) -> Json:
    requirement = obj("a node selector requirement", {
        "key": string("the label key"),
        "operator": string("the relationship", enum=["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        "values": strings("the values"),
    }, required=["key", "operator"])
    return obj(what, {
        "matchExpressions": array("node selector requirements by labels", requirement),
        "matchFields": array("node selector requirements by fields", requirement),
    }, **ATOMIC_MAP)


def pod_affinity_term(what: str) -> Json:
    return obj(what, {
        "labelSelector": label_selector("a label query over a set of resources"),
        "matchLabelKeys": strings("pod label keys to select the pods"),
        "mismatchLabelKeys": strings("pod label keys to exclude pods"),
        "namespaceSelector": label_selector("a label query over the set of namespaces"),
        "namespaces": strings("a static list of namespace names"),
        "topologyKey": string("the topology domain key"),
    }, required=["topologyKey"])


def weighted(what: str, term_name: str, term: Json) -> Json:
    return obj(what, {term_name: term, "weight": int32("the weight, in the range 1-100", minimum=1, maximum=100)},
               required=[term_name, "weight"])


def affinity() -> Json:
    def pod_affinity(what: str) -> Json:
        return obj(what, {
            "preferredDuringSchedulingIgnoredDuringExecution": array(
                "preferred terms", weighted("a weighted term", "podAffinityTerm", pod_affinity_term("the term"))),
            "requiredDuringSchedulingIgnoredDuringExecution": array(
                "required terms", pod_affinity_term("a required term")),
        })

    return obj("the pod's scheduling constraints", {
        "nodeAffinity": obj("node affinity scheduling rules", {
            "preferredDuringSchedulingIgnoredDuringExecution": array(
                "preferred node terms", weighted("a weighted term", "preference", node_selector_term("the term"))),
            "requiredDuringSchedulingIgnoredDuringExecution": obj("required node terms", {
                "nodeSelectorTerms": array("the terms, ORed", node_selector_term("a term")),
            }, required=["nodeSelectorTerms"], **ATOMIC_MAP),
        }),
        "podAffinity": pod_affinity("pod affinity scheduling rules"),
        "podAntiAffinity": pod_affinity("pod anti-affinity scheduling rules"),
    })


def resources(what: str) -> Json:
    return obj(what, {
        "claims": list_map("the dynamic resources this container uses",
                           obj("a resource claim", {"name": string("the claim's name"),
                                                    "request": string("the request's name")},
                               required=["name"]), "name"),
        "limits": {"type": "object", "description": _describe("the maximum compute resources allowed"),
                   "additionalProperties": quantity("a quantity")},
        "requests": {"type": "object", "description": _describe("the minimum compute resources required"),
                     "additionalProperties": quantity("a quantity")},
    })


def handler(what: str, *, sleep: bool = False) -> Json:
    header = obj("an HTTP header", {"name": string("the header name"), "value": string("the header value")},
                 required=["name", "value"])
    props: Json = {
        "exec": obj("the action to take", {"command": strings("the command line to execute")}),
        "httpGet": obj("the HTTP request to perform", {
            "host": string("host name to connect to"),
            "httpHeaders": array("custom headers to set in the request", header),
            "path": string("path to access on the HTTP server"),
            "port": int_or_string("name or number of the port"),
            "scheme": string("scheme to use for connecting", enum=["HTTP", "HTTPS"]),
        }, required=["port"]),
        "tcpSocket": obj("a TCP port", {"host": string("host name"), "port": int_or_string("the port")},
                         required=["port"]),
    }
    if sleep:
        props["sleep"] = obj("how long to sleep", {"seconds": int64("seconds to sleep")}, required=["seconds"])
    return obj(what, props)


def probe(what: str) -> Json:
    out = handler(what)
    out["properties"].update({
        "failureThreshold": int32("minimum consecutive failures", minimum=1),
        "grpc": obj("a GRPC port", {"port": int32("port number"), "service": string("the service name", default="")},
                    required=["port"]),
        "initialDelaySeconds": int32("seconds before probes start", minimum=0),
        "periodSeconds": int32("how often to probe", minimum=1, default=10),
        "successThreshold": int32("minimum consecutive successes", minimum=1),
        "terminationGracePeriodSeconds": int64("grace period on probe failure"),
        "timeoutSeconds": int32("seconds after which the probe times out", minimum=1),
    })
    return out


def security_context(what: str) -> Json:
    return obj(what, {
        "allowPrivilegeEscalation": boolean("whether a process can gain more privileges"),
        "appArmorProfile": obj("the AppArmor options", {
            "localhostProfile": string("a profile loaded on the node"),
            "type": string("which kind of profile", enum=["Localhost", "RuntimeDefault", "Unconfined"]),
        }, required=["type"]),
        "capabilities": obj("the capabilities to add or drop", {
            "add": strings("added capabilities"), "drop": strings("removed capabilities")}),
        "privileged": boolean("run in privileged mode"),
        "procMount": string("the proc mount type"),
        "readOnlyRootFilesystem": boolean("whether the root filesystem is read-only"),
        "runAsGroup": int64("the GID to run the entrypoint"),
        "runAsNonRoot": boolean("the container must run as a non-root user"),
        "runAsUser": int64("the UID to run the entrypoint"),
        "seLinuxOptions": obj("the SELinux context", {
            "level": string("the level label"), "role": string("the role label"),
            "type": string("the type label"), "user": string("the user label")}),
        "seccompProfile": obj("the seccomp options", {
            "localhostProfile": string("a profile on the node"),
            "type": string("which kind of profile", enum=["Localhost", "RuntimeDefault", "Unconfined"]),
        }, required=["type"]),
        "windowsOptions": obj("Windows-specific options", {
            "gmsaCredentialSpec": string("the GMSA credential spec"),
            "gmsaCredentialSpecName": string("the GMSA credential spec name"),
            "hostProcess": boolean("run as a host process"),
            "runAsUserName": string("the user name")}),
    })


def env_var() -> Json:
    return obj("an environment variable", {
        "name": string("the variable's name"),
        "value": string("the variable's value", default=""),
        "valueFrom": obj("a source for the value", {
            "configMapKeyRef": key_selector("a key of a ConfigMap"),
            "fieldRef": obj("a field of the pod", {
                "apiVersion": string("the schema version of the fieldPath", default="v1"),
                "fieldPath": string("the path of the field")}, required=["fieldPath"],
                **ATOMIC_MAP),
            "resourceFieldRef": obj("a resource of the container", {
                "containerName": string("the container name"),
                "divisor": quantity("the output format of the exposed resources"),
                "resource": string("the resource to select")}, required=["resource"],
                **ATOMIC_MAP),
            "secretKeyRef": key_selector("a key of a Secret"),
        }),
    }, required=["name"])


def container(what: str) -> Json:
    port = obj("a network port", {
        "containerPort": int32("the port number", minimum=1, maximum=65535),
        "hostIP": string("the host IP to bind the external port to"),
        "hostPort": int32("the port on the host"),
        "name": string("an IANA_SVC_NAME", maxLength=15),
        "protocol": string("the protocol", enum=["TCP", "UDP", "SCTP"], default="TCP"),
    }, required=["containerPort"])
    env_from = obj("a source of environment variables", {
        "configMapRef": key_selector("the ConfigMap", key=False),
        "prefix": string("a prefix for every key"),
        "secretRef": key_selector("the Secret", key=False),
    })
    mount = obj("a volume mount", {
        "mountPath": string("the path within the container"),
        "mountPropagation": string("how mounts are propagated", enum=["None", "HostToContainer", "Bidirectional"]),
        "name": string("the volume's name"),
        "readOnly": boolean("mounted read-only"),
        "recursiveReadOnly": string("whether read-only mounts are recursive"),
        "subPath": string("the path within the volume"),
        "subPathExpr": string("an expanded path within the volume"),
    }, required=["mountPath", "name"])
    return obj(what, {
        "args": strings("arguments to the entrypoint"),
        "command": strings("the entrypoint array"),
        "env": list_map("environment variables", env_var(), "name"),
        "envFrom": array("sources of environment variables", env_from),
        "image": string("the container image name"),
        "imagePullPolicy": string("the image pull policy", enum=["Always", "Never", "IfNotPresent"]),
        "lifecycle": obj("lifecycle hooks", {"postStart": handler("called after start", sleep=True),
                                             "preStop": handler("called before termination", sleep=True),
                                             "stopSignal": string("the stop signal")}),
        "livenessProbe": probe("periodic probe of liveness"),
        "name": string("the container's name, a DNS label"),
        "ports": list_map("the ports to expose", port, "containerPort", "protocol"),
        "readinessProbe": probe("periodic probe of readiness"),
        "resizePolicy": array("resource resize policy", obj("a resize policy", {
            "resourceName": string("the resource"), "restartPolicy": string("the restart policy")},
            required=["resourceName", "restartPolicy"])),
        "resources": resources("the compute resources required"),
        "restartPolicy": string("the restart policy of an init container", enum=["Always"]),
        "securityContext": security_context("the security options"),
        "startupProbe": probe("probe of startup"),
        "stdin": boolean("allocate a buffer for stdin"),
        "stdinOnce": boolean("close stdin after the first attach"),
        "terminationMessagePath": string("the termination message file"),
        "terminationMessagePolicy": string("how the termination message is populated",
                                           enum=["File", "FallbackToLogsOnError"]),
        "tty": boolean("allocate a TTY"),
        "volumeDevices": list_map("block devices", obj("a device", {
            "devicePath": string("the path inside the container"), "name": string("the claim's name")},
            required=["devicePath", "name"]), "devicePath"),
        "volumeMounts": list_map("volumes to mount", mount, "mountPath"),
        "workingDir": string("the working directory"),
    }, required=["name"])


def key_to_path() -> Json:
    return obj("a key projected to a path", {
        "key": string("the key"), "mode": int32("the file mode bits"), "path": string("the relative path")},
        required=["key", "path"])


def pvc_spec(what: str) -> Json:
    return obj(what, {
        "accessModes": strings("the desired access modes"),
        "dataSource": obj("a data source", {"apiGroup": string("the group"), "kind": string("the kind"),
                                            "name": string("the name")}, required=["kind", "name"]),
        "resources": obj("the minimum resources", {
            "limits": {"type": "object", "description": _describe("the limits"),
                       "additionalProperties": quantity("a quantity")},
            "requests": {"type": "object", "description": _describe("the requests"),
                         "additionalProperties": quantity("a quantity")}}),
        "selector": label_selector("a label query over volumes"),
        "storageClassName": string("the storage class"),
        "volumeAttributesClassName": string("the volume attributes class"),
        "volumeMode": string("the volume mode", enum=["Block", "Filesystem"]),
        "volumeName": string("the binding reference"),
    })


def volume() -> Json:
    items = array("keys to project", key_to_path())
    return obj("a volume", {
        "name": string("the volume's name"),
        "configMap": obj("a ConfigMap volume", {"defaultMode": int32("the default mode"), "items": items,
                                                "name": string("the ConfigMap"),
                                                "optional": boolean("whether it must exist")}),
        "csi": obj("a CSI volume", {"driver": string("the driver"), "fsType": string("the filesystem type"),
                                    "nodePublishSecretRef": key_selector("the secret", key=False),
                                    "readOnly": boolean("read-only"),
                                    "volumeAttributes": string_map("driver-specific properties")},
                   required=["driver"]),
        "downwardAPI": obj("a downward API volume", {"defaultMode": int32("the default mode"), "items": array(
            "the files", obj("a file", {"fieldRef": obj("a field", {"fieldPath": string("the path")},
                                                        required=["fieldPath"]),
                                        "mode": int32("mode bits"), "path": string("the path"),
                                        "resourceFieldRef": obj("a resource", {
                                            "containerName": string("the container"),
                                            "divisor": quantity("the divisor"),
                                            "resource": string("the resource")}, required=["resource"])},
                             required=["path"]))}),
        "emptyDir": obj("a temporary directory", {"medium": string("the storage medium"),
                                                  "sizeLimit": quantity("the total amount of local storage")}),
        "ephemeral": obj("an ephemeral volume", {"volumeClaimTemplate": obj("the claim template", {
            "metadata": {"type": "object", "description": _describe("labels and annotations"),
                         "x-kubernetes-preserve-unknown-fields": True},
            "spec": pvc_spec("the claim's spec")}, required=["spec"])}),
        "hostPath": obj("a host path", {"path": string("the path on the host"), "type": string("the type")},
                        required=["path"]),
        "nfs": obj("an NFS mount", {"path": string("the export"), "readOnly": boolean("read-only"),
                                    "server": string("the server")}, required=["path", "server"]),
        "persistentVolumeClaim": obj("a claim", {"claimName": string("the claim"), "readOnly": boolean("read-only")},
                                     required=["claimName"]),
        "projected": obj("a projected volume", {"defaultMode": int32("the default mode"), "sources": array(
            "the sources", obj("a projection", {
                "configMap": obj("a ConfigMap", {"items": items, "name": string("the name"),
                                                 "optional": boolean("optional")}),
                "secret": obj("a Secret", {"items": items, "name": string("the name"),
                                           "optional": boolean("optional")}),
                "serviceAccountToken": obj("a token", {"audience": string("the audience"),
                                                       "expirationSeconds": int64("the lifetime"),
                                                       "path": string("the path")}, required=["path"]),
            }))}),
        "secret": obj("a Secret volume", {"defaultMode": int32("the default mode"), "items": items,
                                          "optional": boolean("whether it must exist"),
                                          "secretName": string("the Secret")}),
    }, required=["name"])


# ---------------------------------------------------------------------------------- monitoring fragments


def secret_or_config_map(what: str) -> Json:
    return obj(what, {"configMap": key_selector("a ConfigMap key"), "secret": key_selector("a Secret key")})


def tls_config(what: str) -> Json:
    return obj(what, {
        "ca": secret_or_config_map("the CA"), "caFile": string("the CA file"),
        "cert": secret_or_config_map("the client certificate"), "certFile": string("the certificate file"),
        "insecureSkipVerify": boolean("disable target certificate validation"),
        "keyFile": string("the client key file"), "keySecret": key_selector("the client key"),
        "maxVersion": string("the maximum TLS version", enum=["TLS10", "TLS11", "TLS12", "TLS13"]),
        "minVersion": string("the minimum TLS version", enum=["TLS10", "TLS11", "TLS12", "TLS13"]),
        "serverName": string("the server name"),
    })


def relabel_config() -> Json:
    return obj("a relabeling rule", {
        "action": string("the action to perform", default="replace",
                         enum=["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
                               "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep"]),
        "modulus": int64("the modulus to take of the hash"),
        "regex": string("the regular expression"),
        "replacement": string("the replacement value"),
        "separator": string("the separator of concatenated values"),
        "sourceLabels": array("the source labels", {"type": "string",
                                                    "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}),
        "targetLabel": string("the label the result is written to"),
    })


def auth_blocks() -> Json:
    return {
        "authorization": obj("the Authorization header", {
            "credentials": key_selector("the credentials"), "credentialsFile": string("a file"),
            "type": string("the authentication type", default="Bearer")}),
        "basicAuth": obj("basic authentication", {"password": key_selector("the password"),
                                                  "username": key_selector("the user name")}),
        "bearerTokenFile": string("a file to read the bearer token from"),
        "oauth2": obj("OAuth2 client credentials", {
            "clientId": secret_or_config_map("the client id"),
            "clientSecret": key_selector("the client secret"),
            "endpointParams": string_map("extra parameters"),
            "proxyConnectHeader": {"type": "object", "description": _describe("proxy headers"),
                                   "additionalProperties": array("secret references", key_selector("a key")),
                                   "x-kubernetes-map-type": "atomic"},
            "proxyUrl": string("the proxy URL", pattern="^(http|https|socks5)://.+$"),
            "scopes": strings("the scopes"),
            "tlsConfig": tls_config("TLS for the token URL"),
            "tokenUrl": string("the token URL", minLength=1),
        }, required=["clientId", "clientSecret", "tokenUrl"]),
        "tlsConfig": tls_config("TLS for the connection"),
    }


def remote_endpoint(what: str) -> Json:
    return obj(what, {
        **auth_blocks(),
        "headers": string_map("custom HTTP headers"),
        "name": string("the name of the endpoint"),
        "queueConfig": obj("the queue", {
            "batchSendDeadline": duration("the maximum time a sample waits"),
            "capacity": integer("the number of samples to buffer per shard"),
            "maxBackoff": duration("the maximum retry delay"),
            "maxRetries": integer("the maximum retries"),
            "maxSamplesPerSend": integer("the maximum samples per send"),
            "maxShards": integer("the maximum shards"),
            "minBackoff": duration("the initial retry delay"),
            "minShards": integer("the minimum shards"),
            "retryOnRateLimit": boolean("retry on 429"),
            "sampleAgeLimit": duration("drop samples older than this"),
        }),
        "remoteTimeout": duration("the timeout of requests"),
        "sendExemplars": boolean("send exemplars"),
        "url": string("the URL of the endpoint", minLength=1),
        "writeRelabelConfigs": array("relabelings before sending", relabel_config()),
    }, required=["url"])


def alertmanager_endpoint() -> Json:
    return obj("an Alertmanager endpoint", {
        **auth_blocks(),
        "apiVersion": string("the API version", enum=["v1", "V1", "v2", "V2"]),
        "enableHttp2": boolean("use HTTP/2"),
        "name": string("the Service's name"),
        "namespace": string("the Service's namespace"),
        "pathPrefix": string("the prefix of the HTTP path"),
        "port": int_or_string("the port"),
        "relabelings": array("relabelings of the discovered endpoints", relabel_config()),
        "scheme": string("the scheme"),
        "timeout": duration("the push timeout"),
    }, required=["name", "port"])


def extension(index: int) -> Json:
    """One more generated section (for `pad`): a remote endpoint list and a container."""
    return obj(f"generated extension section number {index}", {
        "endpoints": array("extension endpoints", remote_endpoint("an extension endpoint")),
        "sidecar": container("an extension sidecar"),
    })


# ---------------------------------------------------------------------------------- the CRD


def scraper_schema(*, pad: int = 0) -> Json:
    spec_props: Json = {
        "additionalArgs": array("extra command-line arguments", obj("an argument", {
            "name": string("the argument's name"), "value": string("the argument's value")}, required=["name"])),
        "affinity": affinity(),
        "alerting": obj("where alerts go", {"alertmanagers": array("Alertmanager endpoints",
                                                                   alertmanager_endpoint())},
                        required=["alertmanagers"]),
        "containers": list_map("containers merged into the generated pods", container("a container"), "name"),
        "enableAdminAPI": boolean("enable the admin API"),
        "externalLabels": string_map("labels added to every series"),
        "image": string("the image to run"),
        "imagePullSecrets": array("pull secrets", key_selector("a secret", key=False)),
        "initContainers": list_map("init containers", container("an init container"), "name"),
        "logLevel": string("the log level", enum=["", "debug", "info", "warn", "error"]),
        "nodeSelector": string_map("node labels the pods must match"),
        "paused": boolean("stop reconciling"),
        "podMetadata": obj("metadata of the generated pods", {
            "annotations": string_map("annotations"), "labels": string_map("labels"), "name": string("the name")}),
        "podMonitorSelector": label_selector("which PodMonitors to select"),
        "priorityClassName": string("the priority class of the pods"),
        "remoteWrite": array("remote write endpoints", remote_endpoint("a remote write endpoint")),
        "replicas": int32("the number of replicas", minimum=0, default=1),
        "resources": resources("the resources of the main container"),
        "retention": duration("how long to retain samples", default="24h"),
        "ruleSelector": label_selector("which rules to select"),
        "scrapeInterval": duration("the default scrape interval", default="30s"),
        "securityContext": security_context("the pod security context"),
        "serviceAccountName": string("the service account"),
        "serviceMonitorSelector": label_selector("which ServiceMonitors to select"),
        "shards": int32("the number of shards", minimum=1),
        "storage": obj("the storage", {
            "disableMountSubPath": boolean("do not mount a sub path"),
            "emptyDir": obj("an emptyDir", {"medium": string("the medium"), "sizeLimit": quantity("the size")}),
            "volumeClaimTemplate": obj("a claim template", {
                "metadata": obj("the claim's metadata", {"annotations": string_map("annotations"),
                                                         "labels": string_map("labels"),
                                                         "name": string("the name")}),
                "spec": pvc_spec("the claim's spec")}),
        }),
        "tolerations": array("the pod's tolerations", obj("a toleration", {
            "effect": string("the taint effect", enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            "key": string("the taint key"),
            "operator": string("the operator", enum=["Exists", "Equal"]),
            "tolerationSeconds": int64("how long the toleration lasts"),
            "value": string("the taint value")})),
        "topologySpreadConstraints": array("how pods spread", obj("a constraint", {
            "labelSelector": label_selector("the pods to count"),
            "matchLabelKeys": strings("label keys to select the pods"),
            "maxSkew": int32("the degree of unevenness", minimum=1),
            "minDomains": int32("the minimum number of domains"),
            "nodeAffinityPolicy": string("how node affinity is treated", enum=["Honor", "Ignore"]),
            "nodeTaintsPolicy": string("how taints are treated", enum=["Honor", "Ignore"]),
            "topologyKey": string("the topology key"),
            "whenUnsatisfiable": string("what to do", enum=["DoNotSchedule", "ScheduleAnyway"]),
        }, required=["maxSkew", "topologyKey", "whenUnsatisfiable"])),
        "version": string("the version of the scraper to run"),
        "volumeMounts": array("extra volume mounts", container("x")["properties"]["volumeMounts"]["items"]),
        "volumes": array("extra volumes", volume()),
    }
    for i in range(pad):
        spec_props[f"extension{i:03d}"] = extension(i)
    condition = obj("a condition", {
        "lastTransitionTime": string("when the condition last changed", format="date-time"),
        "message": string("a human-readable message"),
        "observedGeneration": int64("the generation the condition was set for"),
        "reason": string("a machine-readable reason"),
        "status": string("the status", enum=["True", "False", "Unknown"]),
        "type": string("the condition's type"),
    }, required=["lastTransitionTime", "status", "type"])
    rules: Json = {
        "x-kubernetes-validations": [
            {"rule": "!has(self.shards) || self.shards <= self.replicas || self.replicas == 0",
             "message": "shards must not exceed replicas"},
            {"rule": "self.replicas <= 50", "message": "at most 50 replicas"},
        ]}
    spec = obj("the desired state of the scraper", spec_props, **rules)
    return {
        "type": "object",
        "description": _describe("a scraper: a monitoring server that this operator runs"),
        "required": ["spec"],
        "properties": {
            "apiVersion": string("the versioned schema of this representation of an object"),
            "kind": string("the REST resource this object represents"),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": obj("the observed state of the scraper", {
                "availableReplicas": int32("available replicas"),
                "conditions": list_map("the current conditions", condition, "type"),
                "paused": boolean("whether reconciliation is paused"),
                "replicas": int32("the number of pods"),
                "selector": string("the label selector of the pods"),
                "shardStatuses": list_map("the status of every shard", obj("a shard", {
                    "availableReplicas": int32("available"), "replicas": int32("total"),
                    "shardID": string("the shard"), "unavailableReplicas": int32("unavailable"),
                    "updatedReplicas": int32("updated")},
                    required=["availableReplicas", "replicas", "shardID", "unavailableReplicas",
                              "updatedReplicas"]), "shardID"),
                "unavailableReplicas": int32("unavailable replicas"),
                "updatedReplicas": int32("updated replicas"),
            }),
        },
    }


def scraper_crd(*, pad: int = 0, name: str = NAME) -> Json:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": {"clients.kubemesh.io/generated-by": "tests/clients/bigcrd.py"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "scraper", "kind": KIND, "listKind": f"{KIND}List",
                      "shortNames": ["scr"], "categories": ["all", "monitoring"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "additionalPrinterColumns": [
                    {"name": "Version", "type": "string", "jsonPath": ".spec.version",
                     "description": "The version of the scraper"},
                    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.availableReplicas"},
                    {"name": "Reconciled", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type == 'Reconciled')].status"},
                    {"name": "Paused", "type": "boolean", "jsonPath": ".status.paused", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": scraper_schema(pad=pad)},
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                         "statusReplicasPath": ".status.replicas",
                                                         "labelSelectorPath": ".status.selector"}},
            }],
        },
    }


def to_yaml(doc: Json) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=100)
