"""The kubemesh pytest plugin for these tests, also before its `pytest11` entry point is installed."""

from __future__ import annotations

import pytest

import services.pytest_plugin as kubemesh_plugin


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(kubemesh_plugin):
        config.pluginmanager.register(kubemesh_plugin, "kubemesh")
