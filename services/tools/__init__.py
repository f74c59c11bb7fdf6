"""What users run: the `kubemesh` command and the pytest plugin over test utilities that work without pytest.

The top layer of `services`; nothing in `kubemesh` below the public API imports it.
"""
