"""The Spark source's planning for speed (planning.task_ranges): with neither minPartitions nor
maxRecordsPerPartition set, a range bigger than DEFAULT_MAX_RECORDS_PER_TASK offsets becomes several
Spark tasks so one busy Kafka partition does not leave the other cores idle; with either option set
spark-sql-kafka's rule applies unchanged. No Spark session, no broker (the rates are in bench/)."""
from kohort.spark import planning as P

N = P.DEFAULT_MAX_RECORDS_PER_TASK


def R_(t, p, a, b):
    return P.OffsetRange(t, p, a, b)


def test_a_big_range_becomes_equal_tasks_by_default():
    out = P.task_ranges([R_("t", 0, 7, 7 + 3 * N), R_("t", 1, 0, 10), R_("t", 2, 5, 5)])
    assert out == [R_("t", 0, 7, 7 + N), R_("t", 0, 7 + N, 7 + 2 * N), R_("t", 0, 7 + 2 * N, 7 + 3 * N),
                   R_("t", 1, 0, 10)]


def test_ranges_up_to_the_default_stay_one_task_per_partition():
    ranges = [R_("t", 0, 0, N), R_("t", 1, 0, 1)]
    assert P.task_ranges(ranges) == P.split_ranges(ranges) == ranges
    assert len(P.task_ranges([R_("t", 0, 0, N + 1)])) == 2


def test_either_option_set_keeps_spark_sql_kafkas_rule():
    ranges = [R_("t", 0, 0, 4 * N), R_("t", 1, 0, 10)]
    assert P.task_ranges(ranges, min_partitions=1) == ranges            # 1-1 as the user asked
    assert P.task_ranges(ranges, min_partitions=2) == P.split_ranges(ranges, min_partitions=2) == ranges
    assert P.task_ranges(ranges, max_records_per_partition=2 * N) == \
        P.split_ranges(ranges, max_records_per_partition=2 * N)
