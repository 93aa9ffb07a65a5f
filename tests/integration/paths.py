"""Both client paths, for test modules that import `namespace` from here: straight to the
partitions (the default) and relayed through the gateway (`Namespace(..., relay=True)`)."""
from __future__ import annotations

import pytest

import ray_broker as rb


@pytest.fixture(params=["direct", "relay"])
def namespace(request: pytest.FixtureRequest, namespace: rb.Namespace) -> rb.Namespace:
    """The session's namespace, reached on the direct path or through the gateway relay."""
    return rb.Namespace(namespace.config, relay=request.param == "relay")
