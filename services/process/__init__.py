"""One component process: bootstrap, supervision, the admin endpoint, chaos points, logs, metrics, GC tuning.

Every component (kubelet, scheduler, controller-manager) runs in this runtime; the apiserver uses
its metrics and GC tuning. It stands on `machinery` and `model`.
"""
