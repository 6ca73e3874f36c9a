"""Tests of kohort's producer: partitioners, batching, idempotence, produce_batch and the transactional
producer."""
