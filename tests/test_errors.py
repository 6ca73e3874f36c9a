"""kohort.errors: the protocol error table (numbers, names, retriable) against two independent
sources (kafka-python's and librdkafka's tables), and the KafkaError API."""
from __future__ import annotations

import pickle

import pytest

from kohort import errors as E
from kohort.errors import (ConfigError, ErrorCode, IncompatibleBrokerVersionError, KafkaConnectionError,
                           KafkaError, KafkaTimeoutError, KohortError, for_code, pick_version,
                           raise_for_code)


def test_every_code_from_minus_one_to_133_once():
    assert sorted(E.ERRORS) == list(range(-1, 134))
    assert len({c.name for c in E.ERRORS.values()}) == len(E.ERRORS)
    assert len({c.__name__ for c in E.ERRORS.values()}) == len(E.ERRORS)
    for code, cls in E.ERRORS.items():
        assert issubclass(cls, KafkaError) and issubclass(cls, KohortError)
        assert cls.code == code and ErrorCode[cls.name] == code
        assert cls.description and not cls.description.endswith(".")
        assert getattr(E, cls.__name__) is cls


def test_names_and_classes():
    assert ErrorCode.NOT_COORDINATOR == 16 and ErrorCode.REBALANCE_IN_PROGRESS == 27
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1 and ErrorCode.NONE == 0
    assert ErrorCode.SHARE_SESSION_LIMIT_REACHED == 133
    assert E.NotCoordinatorError.code == 16 and E.RebalanceInProgressError.code == 27
    assert E.KafkaStorageError.code == 56 and E.InvalidTopicError.code == 17 and E.NetworkError.code == 13
    assert E.UnknownServerError.code == -1 and E.FetchSessionTopicIdError.code == 106
    assert E.class_name("MEMBER_ID_REQUIRED") == "MemberIdRequiredError"


# kafka-python keeps some pre-rename names; Kafka 4.x's Errors enum uses the right-hand ones.
KP_RENAMED = {"NO_ERROR": "NONE", "UNKNOWN": "UNKNOWN_SERVER_ERROR",
              "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
              "MESSAGE_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE", "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
              "INVALID_REPLICATION_ASSIGNMENT": "INVALID_REPLICA_ASSIGNMENT"}


def test_against_kafka_python_error_table():
    import kafka.errors as ke                # test dependencies (pyproject): missing fails, never skips
    seen = 0
    for obj in vars(ke).values():
        if isinstance(obj, type) and getattr(obj, "errno", None) is not None:
            ours = for_code(obj.errno)
            assert ours.name == KP_RENAMED.get(obj.message, obj.message)
            if obj.errno != 2:
                # CORRUPT_MESSAGE: Java's CorruptRecordException is a RetriableException; kafka-python
                # marks it fatal. kohort follows Java.
                assert ours.retriable == obj.retriable, ours.name
            seen += 1
    assert seen > 120


def test_against_librdkafka_error_table():
    import confluent_kafka as ck
    matched = 0
    for code, cls in E.ERRORS.items():
        v = getattr(ck.KafkaError, cls.name, None)
        if v is not None:
            assert v == code, cls.name
            matched += 1
    assert matched > 110
    assert for_code(ck.KafkaError.REBALANCE_IN_PROGRESS) is E.RebalanceInProgressError


def test_message_format_and_raise_for_code():
    err = E.NotCoordinatorError("group g1")
    assert str(err) == f"NOT_COORDINATOR (16): {E.NotCoordinatorError.description}; group g1"
    assert str(E.NotCoordinatorError()) == f"NOT_COORDINATOR (16): {E.NotCoordinatorError.description}"
    assert err.retriable and err.context == "group g1"
    raise_for_code(0)
    raise_for_code(0, "ignored")
    with pytest.raises(E.RebalanceInProgressError, match=r"REBALANCE_IN_PROGRESS \(27\).*; join g"):
        raise_for_code(27, "join g")
    with pytest.raises(KafkaError) as ei:
        raise_for_code(ErrorCode.UNKNOWN_MEMBER_ID)
    assert type(ei.value) is E.UnknownMemberIdError and not ei.value.retriable


def test_unknown_codes_get_a_generic_class_with_the_number():
    cls = for_code(4242)
    assert cls is for_code(4242) and issubclass(cls, KafkaError)
    assert cls.code == 4242 and cls.name == "UNKNOWN_ERROR_CODE_4242" and not cls.retriable
    with pytest.raises(KafkaError, match=r"UNKNOWN_ERROR_CODE_4242 \(4242\)"):
        raise_for_code(4242)
    assert for_code(-5).code == -5
    with pytest.raises(TypeError):
        for_code("16")


def test_pickle_keeps_class_and_message():
    for err in (E.NotCoordinatorError("ctx"), for_code(999)("x"), E.NoneError()):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)


def test_retriable_semantics_follow_java_client():
    retriable = {n for n, c in ((c.name, c) for c in E.ERRORS.values()) if c.retriable}
    assert {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS",
            "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT",
            "NETWORK_EXCEPTION", "UNSTABLE_OFFSET_COMMIT"} <= retriable
    assert not retriable & {"REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION",
                            "FENCED_INSTANCE_ID", "OFFSET_OUT_OF_RANGE", "UNSUPPORTED_VERSION"}
    assert E.is_retriable(16) and not E.is_retriable(27)


def test_client_side_errors():
    assert issubclass(KafkaConnectionError, ConnectionError) and KafkaConnectionError.retriable
    assert issubclass(KafkaTimeoutError, TimeoutError) and KafkaTimeoutError.retriable
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, KohortError)
    assert pick_version("JoinGroup", (0, 9), (2, 7)) == 7
    assert pick_version("Fetch", (4, 18), (0, 11)) == 11
    with pytest.raises(IncompatibleBrokerVersionError, match="v4-v18 but the broker supports v0-v3"):
        pick_version("Fetch", (4, 18), (0, 3))
    with pytest.raises(IncompatibleBrokerVersionError, match="does not support it at all"):
        pick_version("DescribeCluster", (0, 2), None)
