"""Tests of kohort.broker.coordinator: the classic and KIP-848 group machines, the registry, offsets,
and the group APIs over the wire."""
