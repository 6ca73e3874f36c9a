"""Tests of kohort.client.consumer: the consumer, fetcher and the classic and KIP-848 group members."""
