"""Scenarios: the historic control-plane races, run on a real mesh in buggy and in fixed mode.

A scenario (`scenarios.framework.Scenario`) is a small program against the public API: it sets
up nodes and workloads, injects faults (kubelet node operations, the chaos front door), and
states what must eventually happen or must never happen, with deadlines in cluster time. The
runner (`scenarios.running`) starts a fresh mesh per run, switches the scenario's bugs on (buggy
mode) or leaves them off (fixed mode), runs it, collects the apiserver's history and writes a
report (`verdict.txt`, `history.jsonl`, `timeline.html`, `run.json`). The catalog
(`scenarios.catalog`) holds one module per scenario; `scenarios.main` runs them all.
`scenarios.verifying` checks that an oracle proves its own path: the bug switch on and off
times the scenario's faults on and off, and an oracle that reads its window from the history
says inconclusive when the faults were skipped.

This package sits above `services` and the components' public HTTP surfaces; no component
imports it.
"""
