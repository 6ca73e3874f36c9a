"""The pipeline's configuration (TOML -> PipelineConfig, validation with clear errors) and its progress
line / lag arithmetic from a StreamingQueryProgress document. No Spark session, no broker; the
pipeline itself runs in test_spark_source.py (windows per key, SIGKILL + restart exactly once)."""
import os

import pytest

from kohort.errors import ConfigError
from kohort.spark.pipeline import PipelineConfig, load_pipeline_config, progress_dict, progress_line, source_lag

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = {"source": {"topic": "events"}, "events": {"fields": {"user": "string", "amount": "double",
                                                              "ts": "timestamp"}, "event_time": "ts"},
        "aggregate": {"key": "user"}, "sink": {"path": "out/agg", "checkpoint": "out/cp"}}


def with_(section, **kv):
    d = {k: dict(v) for k, v in BASE.items()}
    d.setdefault(section, {}).update(kv)
    return d


def test_example_config_loads_with_paths_relative_to_it():
    cfg = load_pipeline_config(os.path.join(ROOT, "examples", "pipeline.toml"))
    assert cfg.topic == "events" and cfg.key == "user" and cfg.event_time == "ts"
    assert cfg.metrics == ["count", "sum(amount)", "avg(amount)"] and cfg.group_id == "kohort-pipeline"
    assert cfg.path == os.path.join(ROOT, "out", "aggregates")
    over = load_pipeline_config(os.path.join(ROOT, "examples", "pipeline.toml"),
                                bootstrap_servers="h:1", master=None)
    assert over.bootstrap_servers == "h:1" and over.master == "local[2]"


def test_defaults():
    cfg = PipelineConfig.from_dict(BASE, base_dir="/base")
    assert cfg.path == "/base/out/agg" and cfg.checkpoint == "/base/out/cp"
    assert cfg.window == "10 seconds" and cfg.metrics == ["count"] and cfg.mode == "windowed"
    raw = PipelineConfig.from_dict({"source": {"topic": "t"}, "aggregate": {"mode": "raw"},
                                    "sink": {"path": "/p", "checkpoint": "/c"}})
    assert raw.mode == "raw" and raw.fields == {}


@pytest.mark.parametrize("data, words", [
    ({**BASE, "sinks": {}}, ["unknown section", "sinks"]),
    (with_("source", topics="x"), ["unknown key", "[source]", "topics"]),
    (with_("sink", trigger_interval="1 second"), ["unknown key(s) in [sink]: trigger_interval (did you mean trigger?)",
                                                  "known: path, checkpoint, trigger, results_topic"]),
    ({**BASE, "source": {"topik": "events"}}, ["[source] topic is required (is 'topik' a misspelling of it?)"]),
    ({k: v for k, v in BASE.items() if k != "sink"}, ["[sink] path is required"]),
    (with_("aggregate", key="nobody"), ["key 'nobody' is not a declared field"]),
    (with_("aggregate", metrics=["median(amount)"]), ["count or sum/avg/min/max"]),
    (with_("aggregate", metrics=["sum(price)"]), ["undeclared field 'price'"]),
    (with_("aggregate", window="ten seconds"), ["window must look like"]),
    (with_("aggregate", mode="batch"), ["mode must be windowed or raw"]),
    (with_("events", fields={"user": "varchar"}), ["unsupported type 'varchar'"]),
    (with_("events", event_time="when"), ["event_time 'when' is not a declared field"]),
    (with_("source", max_offsets_per_trigger="many"), ["must be an integer"]),
    (with_("sink", dead_letter_topic="events"), ["dead_letter_topic 'events' must differ"]),
    (with_("spark", ship_kohort="no"), ["[spark] ship_kohort must be true or false"]),
    ({"source": {"topic": "t"}, "aggregate": {"mode": "raw"},
      "sink": {"path": "/p", "checkpoint": "/c", "dead_letter_topic": "dlq"}}, ["dead_letter_topic needs"]),
])
def test_bad_configs_say_what_is_wrong(data, words):
    with pytest.raises(ConfigError) as ei:
        PipelineConfig.from_dict(data)
    for w in words:
        assert w in str(ei.value)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_pipeline_config(str(tmp_path / "nope.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_pipeline_config(str(bad))


def test_progress_line_and_lag():
    p = {"batchId": 7, "numInputRows": 1200, "processedRowsPerSecond": 3456.7, "sources": [{
        "endOffset": '{"offsets": {"t": {"0": 100, "1": 50}}, "topic_ids": {"t": "x"}}',
        "latestOffset": '{"offsets": {"t": {"0": 130, "1": 50, "2": 5}}, "topic_ids": {"t": "x"}}'}]}
    d = progress_dict(p)
    assert source_lag(d) == 30 + 0 + 5
    assert progress_line(d) == "batch 7: 1200 rows, 3,457 rows/s, lag 35"
    assert progress_line(None) is None
    assert source_lag({"sources": [{"endOffset": None, "latestOffset": None}]}) is None


def test_dead_letter_topic_and_malformed_count_in_progress():
    assert PipelineConfig.from_dict(with_("sink", dead_letter_topic="dlq")).dead_letter_topic == "dlq"
    assert PipelineConfig.from_dict(BASE).dead_letter_topic is None
    p = {"batchId": 3, "numInputRows": 502, "processedRowsPerSecond": 100.0, "sources": [],
         "observedMetrics": {"kohort_pipeline": {"events": 502, "malformed": 2}}}
    assert progress_line(progress_dict(p)) == "batch 3: 502 rows, 100 rows/s, lag ?, malformed 2"


def test_ship_kohort_is_automatic_unless_set():
    assert PipelineConfig.from_dict(with_("spark", ship_kohort=False)).ship_kohort is False
    assert PipelineConfig.from_dict(BASE).ship_kohort is None
