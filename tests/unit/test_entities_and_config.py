"""Entity names and options, SKU rules, the persisted namespace configuration and partition health."""
from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ray_broker import config as config_module
from ray_broker.config import (
    GROUP_COMMIT_ENV,
    GROUP_COMMIT_THREADS,
    check_namespace_name,
    is_shared_filesystem,
    load_config,
    plan_config,
    replacement_node,
    save_config,
)
from ray_broker.entities import (
    FIXED_QUEUE_PROPERTIES,
    MAX_USER_METADATA_LENGTH,
    QUEUE_DEFAULTS,
    QueueProperties,
    QueueRuntimeProperties,
    check_entity_name,
    normalize_queue_options,
    normalize_subscription_options,
    normalize_topic_options,
)
from ray_broker.errors import InvalidArgumentError, InvalidOperationError
from ray_broker.routing.health import AWAY_BACKOFF, MAX_BACKOFF_S, PartitionHealth
from ray_broker.sku import SKUS, get_sku, partition_count_for


@pytest.mark.parametrize("name", ["a", "A" * 260, "orders.v1-eu_2", "team/orders", "a/b/c", "9lives"])
def test_valid_entity_names(name: str) -> None:
    assert check_entity_name(name) == name


@pytest.mark.parametrize("name", ["", "a" * 261, "has space", "a$b", "$deadletterqueue", "/a", "a/", "a//b",
                                  "ümlaut", "a*b", "a\\b", "orders\n", "\norders", 7, None])
def test_invalid_entity_names(name: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        check_entity_name(name)


def test_invalid_argument_is_both_a_value_error_and_an_invalid_operation() -> None:
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, InvalidOperationError)


def test_defaults_match_service_bus() -> None:
    opts = normalize_queue_options({})
    assert opts == QUEUE_DEFAULTS
    assert (opts["lock_duration"], opts["max_delivery_count"], opts["duplicate_detection_history_time_window"]) == (
        60.0, 10, 600.0)


def test_durations_are_stored_in_seconds() -> None:
    opts = normalize_queue_options({"lock_duration": timedelta(minutes=5),
                                    "duplicate_detection_history_time_window": timedelta(days=7),
                                    "default_message_time_to_live": timedelta(hours=1)})
    assert (opts["lock_duration"], opts["duplicate_detection_history_time_window"],
            opts["default_message_time_to_live"]) == (300.0, 604800.0, 3600.0)


@pytest.mark.parametrize(("option", "value"), [
    ("lock_duration", timedelta(minutes=5, seconds=1)),
    ("lock_duration", timedelta(0)),
    ("duplicate_detection_history_time_window", timedelta(seconds=19)),
    ("duplicate_detection_history_time_window", timedelta(days=7, seconds=1)),
    ("default_message_time_to_live", timedelta(0)),
    ("default_message_time_to_live", timedelta.max),
    ("default_message_time_to_live", float("inf")),
    ("default_message_time_to_live", 10**400),
    ("lock_duration", float("nan")),
    ("lock_duration", float("inf")),
    ("lock_duration", 1e20),
    ("lock_duration", "60s"),
    ("max_delivery_count", 0),
    ("max_delivery_count", True),
    ("max_size_in_megabytes", 0),
    ("requires_session", 1),
    ("status", "Paused"),
    ("forward_to", "bad name"),
    ("no_such_option", 1),
    ("user_metadata", "m" * 1025),
    ("user_metadata", 5),
    ("user_metadata", b"bytes"),
    ("auto_delete_on_idle", timedelta(minutes=4, seconds=59)),
    ("auto_delete_on_idle", "PT10M"),
    ("enable_express", 1),
    ("max_message_size_in_kilobytes", 1024),
])
def test_out_of_range_options_are_invalid_arguments(option: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        normalize_queue_options({option: value})
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidOperationError)


def test_auto_delete_on_idle_is_an_option_of_every_kind_and_never_is_timedelta_max() -> None:
    queue = normalize_queue_options({"auto_delete_on_idle": timedelta(minutes=10), "enable_express": True,
                                     "enable_batched_operations": False})
    assert (queue["auto_delete_on_idle"], queue["enable_express"], queue["enable_batched_operations"]) == \
        (600.0, True, False)
    assert normalize_topic_options({"auto_delete_on_idle": timedelta.max})["auto_delete_on_idle"] is None
    assert normalize_subscription_options({"auto_delete_on_idle": 300})["auto_delete_on_idle"] == 300.0
    props = QueueProperties.from_definition({"name": "q", "options": queue}, sku=get_sku("standard"))
    assert (props.auto_delete_on_idle, props.enable_express, props.enable_batched_operations) == \
        (timedelta(minutes=10), True, False)
    never = QueueProperties.from_definition({"name": "q", "options": normalize_queue_options({})},
                                            sku=get_sku("standard"))
    assert never.auto_delete_on_idle == timedelta.max and normalize_queue_options(never.changes()) == \
        normalize_queue_options({})


def test_update_starts_from_the_current_options() -> None:
    base = normalize_queue_options({"lock_duration": 10, "max_delivery_count": 3})
    updated = normalize_queue_options({"max_delivery_count": 5}, base=base)
    assert (updated["lock_duration"], updated["max_delivery_count"]) == (10.0, 5)
    assert base["max_delivery_count"] == 3


def test_queue_properties_from_a_definition() -> None:
    definition = {"name": "q", "options": normalize_queue_options({"lock_duration": 30}),
                  "created_at": 1_700_000_000.0, "updated_at": 1_700_000_001.0}
    props = QueueProperties.from_definition(definition, sku=get_sku("standard"))
    assert props.lock_duration == timedelta(seconds=30)
    assert props.default_message_time_to_live is None
    assert props.created_at_utc is not None and props.created_at_utc.timestamp() == 1_700_000_000.0
    assert normalize_queue_options(props.changes()) == definition["options"]


@pytest.mark.parametrize(("sku", "kilobytes"), [("basic", 256), ("standard", 256), ("premium", 1024)])
def test_queue_properties_carry_the_sdk_fields_with_their_values_here(sku: str, kilobytes: int) -> None:
    definition = {"name": "q", "options": normalize_queue_options({"user_metadata": "owner: billing"})}
    props = QueueProperties.from_definition(definition, sku=get_sku(sku))
    assert props.max_message_size_in_kilobytes == kilobytes
    assert props.auto_delete_on_idle == timedelta.max
    assert props.enable_batched_operations is True
    assert props.availability_status == "Available"
    assert props.user_metadata == "owner: billing"


def test_fixed_properties_are_not_options_and_user_metadata_round_trips() -> None:
    options = normalize_queue_options({"user_metadata": "v2", "max_delivery_count": 4})
    props = QueueProperties.from_definition({"name": "q", "options": options}, sku=get_sku("premium"))
    changes = props.changes()
    assert not set(FIXED_QUEUE_PROPERTIES) & set(changes)
    assert changes["user_metadata"] == "v2"
    assert normalize_queue_options(changes) == options


@pytest.mark.parametrize("metadata", [None, "", "m" * MAX_USER_METADATA_LENGTH, "ünïcode ✓"])
def test_valid_user_metadata_is_kept_as_given(metadata: str | None) -> None:
    assert normalize_queue_options({"user_metadata": metadata})["user_metadata"] == metadata


def test_a_definition_stored_before_user_metadata_existed_reads_and_updates() -> None:
    old_options = {k: v for k, v in normalize_queue_options({}).items() if k != "user_metadata"}
    props = QueueProperties.from_definition({"name": "q", "options": old_options}, sku=get_sku("standard"))
    assert props.user_metadata is None
    updated = normalize_queue_options({"max_delivery_count": 3}, base=old_options)
    assert updated == {**QUEUE_DEFAULTS, "max_delivery_count": 3}


def test_runtime_properties_sum_partitions_and_report_limited() -> None:
    counts = {"active": 2, "dead_letter": 1, "scheduled": 3, "transfer": 0, "transfer_dead_letter": 0, "size": 100}
    props = QueueRuntimeProperties.aggregate("q", {0: counts, 1: None, 2: counts})
    assert props.availability == "Limited"
    assert (props.active_message_count, props.dead_letter_message_count, props.scheduled_message_count,
            props.total_message_count, props.size_in_bytes) == (4, 2, 6, 12, 200)
    assert [(p.index, p.available) for p in props.partitions] == [(0, True), (1, False), (2, True)]
    assert QueueRuntimeProperties.aggregate("q", {0: counts}).availability == "Available"


def test_sku_partition_counts() -> None:
    assert partition_count_for(get_sku("basic"), None) == 16
    assert partition_count_for(get_sku("Standard"), 16) == 16
    assert partition_count_for(get_sku("premium"), None) == 1
    assert partition_count_for(get_sku("premium"), 64) == 64
    for sku, partitions in (("standard", 4), ("basic", 1), ("premium", 0), ("premium", 65), ("premium", True)):
        with pytest.raises(InvalidArgumentError):
            partition_count_for(get_sku(sku), partitions)
    with pytest.raises(InvalidArgumentError):
        get_sku("gold")


def test_sku_limits_and_features() -> None:
    assert SKUS["basic"].max_message_bytes == SKUS["standard"].max_message_bytes == 256 * 1024
    assert SKUS["premium"].max_message_bytes == 1024 * 1024
    assert SKUS["premium"].all_entities_partitioned
    SKUS["standard"].require("sessions")
    with pytest.raises(InvalidOperationError, match="basic"):
        SKUS["basic"].require("sessions", entity="q")


ONE_NODE: dict[str, Any] = {"nodes": [("node-1", None)], "local_node": "node-1"}


def test_config_is_persisted_and_partition_count_is_immutable(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    first = plan_config("demo", sku="premium", partitions=4, data_dir=str(data), gateways=2,
                        durability="normal", **ONE_NODE)
    assert not data.exists(), "planning writes nothing"
    save_config(first)
    assert (first.partition_count, first.data_dir, first.placement) == (4, str(data), ("node:node-1",) * 4)
    assert load_config(str(data)) == first
    assert first.store_path(3) == str(data / "partition-003.sqlite3")
    again = plan_config("demo", sku="premium", partitions=4, data_dir=str(data), gateways=3,
                        durability="fsync", nodes=[("node-2", None)], local_node="node-2")
    save_config(again)
    assert (again.gateways, again.durability, again.placement) == (3, "fsync", ("node:node-2",) * 4)
    with pytest.raises(InvalidOperationError, match="never change"):
        plan_config("demo", sku="premium", partitions=8, data_dir=str(data), gateways=1,
                     durability="normal", **ONE_NODE)
    with pytest.raises(InvalidOperationError):
        plan_config("demo", sku="standard", partitions=None, data_dir=str(data), gateways=1,
                     durability="normal", **ONE_NODE)
    assert load_config(str(data)) == again


def test_replicas_are_placed_on_distinct_nodes_named_and_stored_apart(tmp_path: Path) -> None:
    nodes = [(f"node-{i}", None) for i in range(4)]
    config = plan_config("rep", sku="premium", partitions=2, data_dir=str(tmp_path / "rep"), gateways=1,
                         durability="memory", nodes=nodes, local_node="node-0", replicas=3)
    assert config.replicated and config.required_copies == 2
    for k in range(2):
        homes = {config.placement[config.slot(k, r)] for r in range(3)}  # type: ignore[index]
        assert len(homes) == 3, "each replica of a partition on a node of its own, in memory too"
    assert config.replica_name(1, 2) == "rep.partition.1.2"
    durable = plan_config("rep", sku="premium", partitions=2, data_dir=str(tmp_path / "rep"), gateways=1,
                          durability="normal", nodes=nodes, local_node="node-0", replicas=3)
    assert durable.store_path(1, None, 2) == str(tmp_path / "rep" / "partition-001-replica-2.sqlite3")
    assert len(durable.store_paths()) == 6
    save_config(durable)
    with pytest.raises(InvalidOperationError, match="replicas=3"):
        plan_config("rep", sku="premium", partitions=2, data_dir=str(tmp_path / "rep"), gateways=1,
                    durability="normal", nodes=nodes, local_node="node-0", replicas=1)


def test_more_replicas_than_distinct_nodes_or_labels_is_refused_naming_how_many_are_needed() -> None:
    labelled = [("node-0", "disk-a"), ("node-1", "disk-a"), ("node-2", None)]
    with pytest.raises(InvalidOperationError, match="replicas=3 needs 3 nodes.*has 2"):
        plan_config("rep", sku="premium", partitions=1, data_dir=None, gateways=1, durability="memory",
                    nodes=labelled, local_node="node-0", replicas=3)
    for bad in (0, 8, True, "3"):
        with pytest.raises(InvalidArgumentError, match="replicas must be an int from 1 to 7"):
            plan_config("rep", sku="premium", partitions=1, data_dir=None, gateways=1, durability="memory",
                        nodes=labelled, local_node="node-0", replicas=bad)  # type: ignore[arg-type]
    one = plan_config("one", sku="premium", partitions=2, data_dir=None, gateways=1, durability="memory",
                      nodes=labelled, local_node="node-0")
    assert not one.replicated and one.replica_name(1, 0) == "one.partition.1"


def test_group_commit_is_opted_into_at_start_and_kept_in_the_configuration(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "demo"
    plain = plan_config("demo", sku="standard", partitions=None, data_dir=str(data), gateways=1,
                        durability="normal", **ONE_NODE)
    assert plain.call_threads == 1, "one call at a time unless asked"
    monkeypatch.setenv(GROUP_COMMIT_ENV, "on")
    grouped = plan_config("demo", sku="standard", partitions=None, data_dir=str(data), gateways=1,
                          durability="normal", **ONE_NODE)
    assert grouped.call_threads == GROUP_COMMIT_THREADS > 1
    save_config(grouped)
    assert load_config(str(data)) == grouped


def test_memory_namespaces_keep_no_files(tmp_path: Path) -> None:
    cfg = plan_config("mem", sku="standard", partitions=None, data_dir=str(tmp_path / "mem"), gateways=1,
                       durability="memory", **ONE_NODE)
    assert (cfg.partition_count, cfg.data_dir, cfg.placement) == (16, None, None)
    assert not (tmp_path / "mem").exists()


def test_default_data_dir_follows_ray_broker_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_BROKER_HOME", str(tmp_path))
    cfg = plan_config("home", sku="standard", partitions=None, data_dir=None, gateways=1,
                       durability="normal", **ONE_NODE)
    assert cfg.data_dir == str(tmp_path / "home")
    assert cfg.partition_name(3) == "home.partition.3" and cfg.gateway_name(0) == "home.gateway.0"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"gateways": 0}, "gateways"), ({"gateways": 17}, "gateways"), ({"durability": "disk"}, "durability"),
])
def test_config_argument_checks(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"sku": "standard", "partitions": None, "data_dir": str(tmp_path), "gateways": 1,
                            "durability": "normal", **ONE_NODE, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        plan_config("ns", **args)


@pytest.mark.parametrize("name", ["", "1abc", "a_b", "a" * 51, "a.b"])
def test_namespace_names(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        check_namespace_name(name)


def test_shared_filesystem_detection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_shared_filesystem(str(tmp_path)) is False
    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "server:/export /mnt/shared nfs4 rw 0 0\n"
              "/dev/vdb /mnt/shared/local ext4 rw 0 0\n")
    monkeypatch.setattr(config_module, "open", lambda *a, **k: io.StringIO(mounts), raising=False)
    assert is_shared_filesystem("/mnt/shared/data") is True
    assert is_shared_filesystem("/mnt/shared") is True
    assert is_shared_filesystem("/mnt/shared/local/data") is False
    assert is_shared_filesystem("/mnt/sharedother") is False


def test_shared_data_dir_is_not_pinned_to_a_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "is_shared_filesystem", lambda path: True)
    cfg = plan_config("nfs", sku="standard", partitions=None, data_dir=str(tmp_path), gateways=1,
                       durability="normal", **ONE_NODE)
    assert cfg.placement is None


def test_partition_health_backs_off_and_recovers() -> None:
    health = PartitionHealth(3)
    assert health.order([0, 1, 2], now=0.0) == [0, 1, 2]
    backoffs = [health.failed(1, now=0.0) for _ in range(10)]
    assert backoffs[:3] == [0.05, 0.1, 0.2] and backoffs[-1] == MAX_BACKOFF_S
    assert not health.available(1, now=0.0)
    assert health.order([0, 1, 2], now=0.0) == [0, 2, 1]
    assert health.available(1, now=MAX_BACKOFF_S)
    health.failed(2, now=0.0)
    health.succeeded(2)
    assert health.available(2, now=0.0)


def test_a_partition_that_stays_away_is_held_ever_longer_until_it_answers() -> None:
    health = PartitionHealth(2)
    health.failed(1, now=0.0)
    assert health.failing_for(1, now=12.0) == 12.0 and health.failing_for(0, now=12.0) == 0.0
    assert [health.hold_away(1, now=12.0) for _ in range(5)] == [30.0, 60.0, 120.0, 240.0, 240.0]
    health.failed(1, now=13.0)
    assert not health.available(1, now=12.0 + 239.0), "a failure does not cut a hold short"
    assert health.available(1, now=12.0 + AWAY_BACKOFF.maximum)
    health.succeeded(1)
    assert health.available(1, now=13.0) and health.failing_for(1, now=20.0) == 0.0
    assert health.hold_away(1, now=20.0) == AWAY_BACKOFF.initial, "an answer starts the holds over"


def test_a_restarted_namespace_pins_partitions_to_the_current_node(tmp_path: Path) -> None:
    """Ray gives a node a new id when it restarts: a partition pinned to a node id that is gone
    goes to the node starting the namespace now."""
    first = plan_config("pinned", sku="premium", partitions=2, data_dir=str(tmp_path), gateways=1,
                        durability="normal", nodes=[("node-before-restart", None)], local_node="node-before-restart")
    save_config(first)
    again = plan_config("pinned", sku="premium", partitions=2, data_dir=str(tmp_path), gateways=1,
                        durability="normal", nodes=[("node-after-restart", None)], local_node="node-after-restart")
    assert first.placement == ("node:node-before-restart",) * 2
    assert again.placement == ("node:node-after-restart",) * 2


def test_partitions_spread_over_nodes_and_stay_with_labelled_ones(tmp_path: Path) -> None:
    nodes = [("id-head", None), ("id-1", "disk-a"), ("id-2", "disk-b")]
    first = plan_config("spread", sku="premium", partitions=6, data_dir=str(tmp_path), gateways=1,
                        durability="normal", nodes=nodes, local_node="id-head")
    assert first.placement == ("label:disk-a", "label:disk-b", "node:id-head") * 2
    save_config(first)
    assert load_config(str(tmp_path)) == first
    after_loss = plan_config("spread", sku="premium", partitions=6, data_dir=str(tmp_path), gateways=1,
                             durability="normal", nodes=[("id-new-head", None), ("id-1", "disk-a")],
                             local_node="id-new-head")
    assert after_loss.placement == ("label:disk-a", "label:disk-b", "node:id-new-head") * 2, \
        "a labelled partition waits for its label; one pinned to a lost node id moves to the starting node"
    assert first.store_path(1, "/mnt/node-b") == "/mnt/node-b/spread/partition-001.sqlite3"


def test_auth_tokens_are_kept_as_hashes_and_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ray_broker.config import AUTH_TOKEN_ENV, check_auth_token, token_hash
    from ray_broker.errors import UnauthorizedError

    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)
    cfg = plan_config("tok", sku="standard", partitions=None, data_dir=str(tmp_path), gateways=1,
                      durability="normal", **ONE_NODE, auth_token_hash=token_hash("s3cret"))
    assert cfg.auth_token_hash is not None and "s3cret" not in str(cfg.to_dict())
    check_auth_token(cfg, "s3cret")
    with pytest.raises(UnauthorizedError, match="requires an auth token"):
        check_auth_token(cfg, None)
    with pytest.raises(UnauthorizedError, match="not the one"):
        check_auth_token(cfg, "other")
    monkeypatch.setenv(AUTH_TOKEN_ENV, "s3cret")
    check_auth_token(cfg, None)
    open_cfg = plan_config("open", sku="standard", partitions=None, data_dir=str(tmp_path / "o"), gateways=1,
                           durability="memory", **ONE_NODE)
    check_auth_token(open_cfg, None)
    with pytest.raises(InvalidArgumentError):
        token_hash("")


def test_a_replica_whose_node_is_gone_is_made_again_on_a_node_without_a_replica_of_its_partition() -> None:
    nodes = [(f"node-{i}", None) for i in range(4)]
    config = plan_config("rep", sku="premium", partitions=2, data_dir=None, gateways=1, durability="memory",
                         nodes=nodes, local_node="node-0", replicas=3)
    homes = [config.placement[config.slot(1, r)].removeprefix("node:") for r in range(3)]  # type: ignore[index]
    lost = homes[0]
    alive = [n for n, _ in nodes if n != lost]
    replacement = replacement_node(config, config.slot(1, 0), alive, set())
    assert replacement in alive and replacement not in homes
    assert replacement_node(config, config.slot(1, 0), homes[1:], set()) is None, "no node left without a replica"
    assert replacement_node(config, config.slot(1, 0), alive, {replacement}) is None, \
        "nor one where another replica runs now (moved there, or placed by label)"
