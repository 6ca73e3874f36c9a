"""Tests of kohort.cli: the `kohort` command beside Kafka's tools and kcat."""
