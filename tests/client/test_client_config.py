"""Client configuration: Kafka names and defaults, coercion, validation, closest-key suggestions."""
import pytest

from kohort.client.config import ConfigError, load_config, parse_bootstrap


def test_defaults_are_kafkas():
    c = load_config("consumer", {"bootstrap.servers": "h:9092"})
    assert c["session.timeout.ms"] == 45000
    assert c["heartbeat.interval.ms"] == 3000
    assert c["max.poll.interval.ms"] == 300000
    assert c["max.poll.records"] == 500
    assert c["auto.offset.reset"] == "latest"
    assert c["enable.auto.commit"] is True
    assert c["partition.assignment.strategy"] == ["range", "cooperative-sticky"]
    assert c["fetch.max.bytes"] == 52428800 and c["max.partition.fetch.bytes"] == 1048576
    assert c["group.id"] is None
    assert c.given == {"bootstrap.servers"}


def test_strings_are_coerced_like_properties_files():
    c = load_config("consumer", {"bootstrap.servers": "a:1,b:2", "enable.auto.commit": "false",
                                 "max.poll.records": "10", "auto.offset.reset": "EARLIEST"})
    assert c["enable.auto.commit"] is False and c["max.poll.records"] == 10
    assert c["auto.offset.reset"] == "earliest"
    assert c["bootstrap.servers"] == ["a:1", "b:2"]


def test_unknown_key_names_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'auto.offset.reset'"):
        load_config("consumer", {"bootstrap.servers": "h:1", "auto.offset.rest": "earliest"})
    with pytest.raises(ConfigError, match="it is a producer setting"):
        load_config("consumer", {"bootstrap.servers": "h:1", "linger.ms": 5})


@pytest.mark.parametrize("conf, msg", [
    ({}, "bootstrap.servers is required"),
    ({"bootstrap.servers": "nohost"}, "not host:port"),
    ({"bootstrap.servers": "h:1", "max.poll.records": 0}, "max.poll.records must be >= 1"),
    ({"bootstrap.servers": "h:1", "max.poll.records": "many"}, "must be an integer"),
    ({"bootstrap.servers": "h:1", "auto.offset.reset": "smallest"}, "must be one of"),
    ({"bootstrap.servers": "h:1", "heartbeat.interval.ms": 50000}, "must be lower than session.timeout.ms"),
    ({"bootstrap.servers": "h:1", "group.instance.id": "i"}, "needs a group.id"),
    ({"bootstrap.servers": "h:1", "partition.assignment.strategy": "range,fancy"}, "unknown value"),
    ({"bootstrap.servers": "h:1", "enable.auto.commit": "yes"}, "true or false"),
])
def test_bad_values_are_clear(conf, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config("consumer", conf)


def test_producer_role_and_acks():
    c = load_config("producer", {"bootstrap.servers": "h:1", "acks": "all"})
    assert c["acks"] == -1 and c["linger.ms"] == 5
    assert load_config("producer", {"bootstrap.servers": "h:1", "acks": 1, "enable.idempotence": False})["acks"] == 1
    with pytest.raises(ConfigError, match="acks=all"):
        load_config("producer", {"bootstrap.servers": "h:1", "acks": "1", "enable.idempotence": True})


def test_parse_bootstrap():
    assert parse_bootstrap(["h:1", "[::1]:9093", "PLAINTEXT://x:5"]) == [("h", 1), ("::1", 9093), ("x", 5)]
    with pytest.raises(ConfigError):
        parse_bootstrap(["h:99999"])
