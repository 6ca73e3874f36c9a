"""Tests of kohort.broker: connections, handlers over the wire, durability, limits, security."""
