"""Kafka error codes by Kafka's names, and kohort's typed exceptions.

`KafkaError` subclasses exist for every protocol error code (see ERRORS / for_code); each has
`code`, `name`, `retriable` and a message a user can act on. DecodeError is what any malformed
bytes raise in kohort.protocol, and nothing else.
"""
from __future__ import annotations


class KohortError(Exception):
    """Base of every exception kohort raises on purpose."""


class DecodeError(KohortError):
    """Bytes from the wire (or a file) do not decode as the expected Kafka structure."""


class EncodeError(KohortError, ValueError):
    """A value cannot be encoded in the requested version."""
