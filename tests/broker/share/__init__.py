"""Tests of kohort.broker.share: share partitions, share groups, sessions and the broker's share APIs
(KIP-932)."""
