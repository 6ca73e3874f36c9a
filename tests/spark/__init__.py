"""Tests of kohort.spark: the format("kohort") source and sink, the pipeline, Spark Connect."""
