"""What every component and every tool stands on, in layers that import only downward.

    tools      the `kubemesh` command, the pytest plugin, test utilities
    mesh       one handle on a running mesh, the local launcher, compose, the chaos client, kubectl
    process    a component process: bootstrap, supervision, admin endpoint, chaos points, logs, metrics
    machinery  the API client, informers, work queues, leader election, events, the clock, TLS
    model      kinds, selectors, quantities, pod helpers, the codec, bug switches, well-known keys

Components use `process` and below, never `mesh` or `tools`; `services` imports no component
and no scenario. The import-linter contracts in pyproject.toml keep it so.
"""
