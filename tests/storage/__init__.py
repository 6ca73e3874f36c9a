"""Tests of kohort.storage: logs, segments, indexes, recovery, group commit."""
