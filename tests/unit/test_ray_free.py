"""The engine, routing, message model, protocol, client core and lock renewal policy import and run
where Ray is absent."""
from __future__ import annotations

import subprocess
import sys

RAY_FREE_MODULES = ("ray_broker", "ray_broker.partitioning", "ray_broker.engine.partition",
                    "ray_broker.engine.store_lock", "ray_broker.routing",
                    "ray_broker.message", "ray_broker.protocol", "ray_broker.client.core", "ray_broker.client.renewal",
                    "ray_broker.entities", "ray_broker.observability", "ray_broker.routing.forwarding",
                    "ray_broker.client.transacting")

PROBE = """
import sys
sys.modules["ray"] = None
import importlib
for name in sys.argv[1:]:
    importlib.import_module(name)
import ray_broker as rb
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
engine = PartitionEngine(0, 1, Store(None, "memory"))
print("ENGINE", type(engine).__name__, rb.Message("x").body, rb.partition_of(3 << 48))
try:
    rb.start
except ImportError:
    print("CLIENT NEEDS RAY")
"""


def test_core_modules_import_without_ray() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, *RAY_FREE_MODULES], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "ENGINE PartitionEngine b'x' 3" in result.stdout
    assert "CLIENT NEEDS RAY" in result.stdout, "client names load Ray on first use"
