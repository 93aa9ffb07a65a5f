"""The deployment recipes in `cluster/`, checked without a cluster: they parse, start the
project's namespace, keep Ray's token authentication on, label every node that may hold
partitions with its store, give those nodes their own data directory, and ask for consistent
resources on the Ray version the package pins."""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from ray_broker.config import AUTH_TOKEN_ENV, NODE_DATA_DIR_ENV, STORE_LABEL

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
LAUNCHER = CLUSTER / "ray-cluster.yaml"
RAYCLUSTER = CLUSTER / "kuberay-raycluster.yaml"
RAYJOB = CLUSTER / "kuberay-rayjob.yaml"


def pinned_ray_version() -> str:
    """The `ray==X` (or `ray[extras]==X`) pin in pyproject.toml."""
    match = re.search(r'"ray(?:\[[a-z,-]+\])?==([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert match, "pyproject.toml pins no ray version"
    return match.group(1)


def documents(path: Path) -> list[dict[str, Any]]:
    """Every YAML document in `path`."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def only(path: Path, kind: str) -> dict[str, Any]:
    """The one document of `kind` in `path`."""
    [doc] = [d for d in documents(path) if d.get("kind") == kind]
    return doc


def groups(raycluster: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """`(group name, group spec)` of the head group and every worker group."""
    yield "head", raycluster["spec"]["headGroupSpec"]
    for group in raycluster["spec"]["workerGroupSpecs"]:
        yield group["groupName"], group


def ray_container(group: dict[str, Any]) -> dict[str, Any]:
    """The Ray container of a group's pod (KubeRay's convention: the first one)."""
    return group["template"]["spec"]["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's environment entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


def ray_start_commands(launcher: dict[str, Any]) -> list[str]:
    """Every launcher command that runs `ray start`."""
    commands = launcher["head_start_ray_commands"] + launcher["worker_start_ray_commands"]
    return [c for c in commands if "ray start" in c]


def test_every_recipe_parses_as_what_it_claims_to_be() -> None:
    assert documents(LAUNCHER)[0]["provider"]["type"]
    assert {d["kind"] for d in documents(RAYCLUSTER)} == {"PersistentVolumeClaim", "RayCluster"}
    assert only(RAYJOB, "RayJob")["apiVersion"] == "ray.io/v1"


def test_each_recipe_names_the_projects_start_command() -> None:
    for path in (LAUNCHER, RAYCLUSTER):
        assert re.search(r"ray-broker start -n \w+", path.read_text(encoding="utf-8")), path.name
    entrypoint = only(RAYJOB, "RayJob")["spec"]["entrypoint"]
    assert "rb.start(" in entrypoint and "ray-broker status" in entrypoint


def test_the_rayjob_entrypoint_is_valid_python_that_checks_what_it_received() -> None:
    entrypoint = only(RAYJOB, "RayJob")["spec"]["entrypoint"]
    words = shlex.split(entrypoint)
    assert words[:2] == ["python", "-c"]
    code = compile(words[2], "kuberay-rayjob.yaml:entrypoint", "exec")
    assert "SystemExit" in code.co_names


def test_the_launcher_starts_every_node_with_ray_token_auth() -> None:
    launcher = documents(LAUNCHER)[0]
    starts = ray_start_commands(launcher)
    assert len(starts) == 2
    assert all("RAY_AUTH_MODE=token" in command for command in starts)
    assert "~/.ray/auth_token" in launcher["file_mounts"]
    assert "disabled" not in LAUNCHER.read_text(encoding="utf-8")


def test_the_launcher_labels_every_node_with_its_store_and_data_dir() -> None:
    for command in ray_start_commands(documents(LAUNCHER)[0]):
        assert f"--labels {STORE_LABEL}=" in command
        assert f"{NODE_DATA_DIR_ENV}=" in command


def test_the_launchers_shells_carry_both_tokens() -> None:
    setup = "\n".join(documents(LAUNCHER)[0]["setup_commands"])
    assert "RAY_AUTH_MODE=token" in setup and f"{AUTH_TOKEN_ENV}=" in setup


def test_the_raycluster_has_ray_token_auth_on() -> None:
    raycluster = only(RAYCLUSTER, "RayCluster")
    assert raycluster["spec"]["authOptions"]["mode"] == "token"
    for name, group in groups(raycluster):
        assert env_of(ray_container(group)).get("RAY_AUTH_MODE", {}).get("value", "token") == "token", name


def test_the_rayjob_runs_on_the_token_guarded_raycluster() -> None:
    spec = only(RAYJOB, "RayJob")["spec"]
    raycluster = only(RAYCLUSTER, "RayCluster")
    assert "rayClusterSpec" not in spec
    assert spec["clusterSelector"] == {"ray.io/cluster": raycluster["metadata"]["name"]}
    assert raycluster["spec"]["authOptions"]["mode"] == "token"


def test_every_raycluster_group_is_one_pod_with_its_own_store_label_and_volume() -> None:
    raycluster = only(RAYCLUSTER, "RayCluster")
    claims = {d["metadata"]["name"] for d in documents(RAYCLUSTER) if d["kind"] == "PersistentVolumeClaim"}
    labels, used_claims = [], []
    for name, group in groups(raycluster):
        assert group.get("replicas", 1) == group.get("minReplicas", 1) == group.get("maxReplicas", 1) == 1, name
        labels.append(group["labels"][STORE_LABEL])
        container = ray_container(group)
        data_dir = env_of(container)[NODE_DATA_DIR_ENV]["value"]
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == data_dir]
        [volume] = [v for v in group["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        used_claims.append(volume["persistentVolumeClaim"]["claimName"])
    assert len(set(labels)) == len(labels)
    assert sorted(used_claims) == sorted(claims)


def test_every_raycluster_pod_has_the_brokers_token() -> None:
    for name, group in groups(only(RAYCLUSTER, "RayCluster")):
        assert "secretKeyRef" in env_of(ray_container(group))[AUTH_TOKEN_ENV]["valueFrom"], name


def test_raycluster_resources_request_what_they_limit_and_match_across_groups() -> None:
    resources = []
    for name, group in groups(only(RAYCLUSTER, "RayCluster")):
        wanted = ray_container(group)["resources"]
        assert wanted["requests"] == wanted["limits"], name
        assert {"cpu", "memory"} <= set(wanted["limits"]), name
        resources.append(wanted["limits"])
    assert all(r == resources[0] for r in resources)


def test_raycluster_images_run_the_pinned_ray_version() -> None:
    version = pinned_ray_version()
    raycluster = only(RAYCLUSTER, "RayCluster")
    assert raycluster["spec"]["rayVersion"] == version
    for name, group in groups(raycluster):
        for container in group["template"]["spec"]["containers"]:
            image = container["image"]
            if image.startswith("rayproject/"):
                assert image.split(":")[1].split("-")[0] == version, (name, image)


@pytest.mark.parametrize("path", [LAUNCHER, RAYCLUSTER], ids=lambda p: p.name)
def test_recipes_install_the_package_that_pins_ray(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert re.search(r"pip install .*(-e ~/ray_broker|\$RAY_BROKER_PACKAGE)", text)
