"""aiokafka's ConsumerRebalanceListener: subclass it and pass it to subscribe(); its methods may be
plain functions or coroutines (awaited). Revocation is not reported on stop(), as in aiokafka."""
from __future__ import annotations

import abc


class ConsumerRebalanceListener(abc.ABC):
    @abc.abstractmethod
    def on_partitions_revoked(self, revoked):
        """The partitions this member gives up (a set of TopicPartition)."""

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned):
        """The partitions this member now owns (a set of TopicPartition)."""


__all__ = ["ConsumerRebalanceListener"]
