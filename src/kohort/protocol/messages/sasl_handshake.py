"""SaslHandshake (API key 17), v0-v1: choose a SASL mechanism (KIP-43).

v0 is followed by raw SASL tokens; v1 by SaslAuthenticate requests (KIP-152). Never flexible; the version
cannot be bumped easily because of client negotiation bugs (KAFKA-9577).
"""
from kohort.protocol.schema import INT16, STRING, Array, Message, f


class SaslHandshakeRequest(Message):
    API_KEY = 17
    VALID = "0-1"
    FLEXIBLE = "none"
    SCHEMA = [
        f("mechanism", STRING),
    ]


class SaslHandshakeResponse(Message):
    API_KEY = 17
    VALID = "0-1"
    FLEXIBLE = "none"
    SCHEMA = [
        f("error_code", INT16),
        f("mechanisms", Array(STRING)),
    ]

