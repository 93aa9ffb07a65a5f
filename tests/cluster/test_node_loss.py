"""Losing a node on a 3-node cluster: unkeyed sends carry on, keyed sends to the lost node's
partitions raise `PartitionUnavailableError` within their timeout and are never placed elsewhere,
runtime properties say `Limited` and name the partitions that are down, and the node's return
brings its partitions back, on it, with every message they held.

The cluster (`ray.cluster_utils.Cluster`) runs in a process of its own (`node_loss_run`), since
this one may already be attached to the test session's Ray.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_lost_node_takes_only_its_partitions_away_and_brings_them_back(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "tests.cluster.node_loss_run", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=290)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    on_b = [k for k, home in enumerate(result["placement"]) if home == "label:disk-b"]
    assert on_b and result["placed_on_b"] == on_b, "partitions run on the node their label names"
    assert result["stores_on_b"] == [f"partition-{k:03d}.sqlite3" for k in on_b], "in that node's own data dir"
    assert result["unkeyed_errors_while_down"] == 0
    assert result["keyed_while_down"].startswith("PartitionUnavailableError")
    assert float(result["keyed_while_down"].split()[-1].rstrip("s")) < 10.0
    assert result["keyed_error_partition"] in on_b
    assert result["availability_while_down"] == "Limited" and result["down_partitions"] == on_b
    assert result["back_on_new_node"] == on_b, "they came back on the returning node, nowhere else"
    assert result["received"] == result["distinct"] == result["expected"], "every message, once"
