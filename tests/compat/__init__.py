"""Tests of kohort.compat: confluent-kafka and aiokafka programs run on kohort's clients."""
