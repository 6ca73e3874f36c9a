"""Option errors of format("kohort") without Spark: what load() checks (DataSource.schema(), called for
both query types), what waits for the query type, and the options kohort refuses. The same errors
through a real SparkSession are in test_spark_source.py (test_option_errors_*)."""
import pytest

from kohort.errors import ConfigError
from kohort.spark.options import parse_source_options
from kohort.spark.source import KohortDataSource

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.mark.parametrize("opts, words", [
    ({"maxOffsetsPerTrigger": "many"}, ["'maxOffsetsPerTrigger' must be a positive integer"]),
    ({"minOffsetsPerTrigger": "0"}, ["'minOffsetsPerTrigger' must be a positive integer"]),
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"}, ["larger than maxOffsetsPerTrigger"]),
    ({"maxTriggerDelay": "soon"}, ["'maxTriggerDelay' must be a duration"]),
    ({"endingOffsets": "earliest"}, ["endingOffsets=earliest is not allowed"]),
    ({"maxOffsetPerTrigger": "10"}, ["did you mean 'maxOffsetsPerTrigger'"]),
])
def test_schema_checks_every_option_at_load(opts, words):
    ds = KohortDataSource({**BS, **opts})
    with pytest.raises(ConfigError) as ei:
        ds.schema()
    for w in words:
        assert w in str(ei.value)


def test_schema_leaves_query_type_rules_to_the_reader():
    # valid for one query type each: load() cannot know which one it is
    assert "headers" in KohortDataSource({**BS, "endingOffsets": "latest", "includeHeaders": "true"}).schema()
    assert KohortDataSource({**BS, "startingOffsets": "latest"}).schema()
    with pytest.raises(ConfigError, match="startingOffsets=latest is not allowed for batch"):
        KohortDataSource({**BS, "startingOffsets": "latest"}).reader(None)


def test_stream_reader_reports_streaming_rules_from_its_first_call():
    reader = KohortDataSource({**BS, "endingOffsets": "latest"}).streamReader(None)
    with pytest.raises(ConfigError, match="ending offsets .* are for batch queries only"):
        reader.initialOffset()
    with pytest.raises(ConfigError, match="for batch queries only"):
        reader.latestOffset({}, None)
    reader.stop()                              # what pyspark calls in its `finally`: must not fail


def test_group_id_prefix_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as ei:
        parse_source_options({**BS, "groupIdPrefix": "my-app"})
    msg = str(ei.value)
    assert "'groupIdPrefix' is not supported" in msg and "kafka.group.id" in msg
    with pytest.raises(ConfigError, match="groupIdPrefix"):
        KohortDataSource({**BS, "GROUPIDPREFIX": "x"}).schema()        # keys are case-insensitive
