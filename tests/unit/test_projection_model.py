"""The projection model of `benchmarks.projection`: which bound sets throughput on N cores."""
from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.projection_model import CpuProfile, ceilings, project, projections


def test_spread_work_scales_with_cores_until_the_busiest_partition_caps_it() -> None:
    # 1,000 messages; 16 partitions of 6.25 ms each (0.1 s in all), clients 0.3 s, raylet 1 ms:
    # 0.401 s in all, 401 us per message; the busiest partition 6.25 us per message.
    profile = CpuProfile(1000, {"clients": 0.3, "partitions": 0.1, "raylet": 0.001}, (0.00625,) * 16)
    assert profile.total_per_message() == pytest.approx(401e-6)
    assert ceilings(profile) == pytest.approx({"busiest_partition": 160_000.0, "raylet": 1_000_000.0})
    assert project(profile, 4) == {"msgs_per_s": round(4 / 401e-6, 1), "bound": "cores"}
    assert project(profile, 64) == {"msgs_per_s": round(64 / 401e-6, 1), "bound": "cores"}
    assert project(profile, 128) == {"msgs_per_s": 160_000.0, "bound": "busiest_partition"}


def test_one_partition_is_capped_at_one_core_whatever_the_cores() -> None:
    profile = CpuProfile(1000, {"clients": 0.2, "partitions": 0.25}, (0.25,))
    assert project(profile, 1) == {"msgs_per_s": round(1 / 450e-6, 1), "bound": "cores"}
    assert project(profile, 16) == project(profile, 64) == {"msgs_per_s": 4000.0, "bound": "busiest_partition"}


def test_a_single_queue_actor_caps_the_queue_and_the_keys_are_core_counts() -> None:
    profile = CpuProfile(2000, {"clients": 0.1, "queue_actor": 0.1, "gcs_server": 0.0})
    out = projections(profile, [4, 16])
    assert out == {"4": {"msgs_per_s": 20_000.0, "bound": "queue_actor"},
                   "16": {"msgs_per_s": 20_000.0, "bound": "queue_actor"}}
    assert "gcs_server" not in ceilings(profile), "a process that spent nothing sets no ceiling"


def test_clients_elsewhere_leave_the_cores_to_the_broker() -> None:
    profile = CpuProfile(1000, {"clients": 0.3, "partitions": 0.1}, (0.00625,) * 16)
    assert project(profile, 8) == {"msgs_per_s": 20_000.0, "bound": "cores"}
    assert project(profile, 8, elsewhere=("clients",)) == {"msgs_per_s": 80_000.0, "bound": "cores"}
    assert project(profile, 64, elsewhere=("clients",)) == {"msgs_per_s": 160_000.0, "bound": "busiest_partition"}
    with pytest.raises(ValueError, match="spent no CPU"):
        project(profile, 4, elsewhere=("clients", "partitions"))


def test_an_uneven_load_is_capped_by_the_partition_that_spent_most() -> None:
    even = CpuProfile(1000, {"partitions": 0.4}, (0.1, 0.1, 0.1, 0.1))
    skewed = CpuProfile(1000, {"partitions": 0.4}, (0.25, 0.05, 0.05, 0.05))
    assert project(even, 64)["msgs_per_s"] == 10_000.0
    assert project(skewed, 64) == {"msgs_per_s": 4000.0, "bound": "busiest_partition"}


def test_nothing_to_project_from_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one message"):
        CpuProfile(0, {"clients": 1.0})
    with pytest.raises(ValueError, match="spent no CPU"):
        project(CpuProfile(10, {"clients": 0.0}), 4)
    with pytest.raises(ValueError, match="cores must be at least 1"):
        project(CpuProfile(10, {"clients": 1.0}), 0)


def test_the_model_imports_without_ray() -> None:
    code = "import sys, benchmarks.projection_model; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
