"""Meshes from the outside: `MeshEndpoint`, the local launcher, state files, compose, chaos client, kubectl.

Tooling that runs on wall time; no component imports it. It stands on `process` and below.
"""
