"""SaslAuthenticate (API key 36), v0-v2: carry SASL tokens inside Kafka frames (KIP-152).

v1 adds session_lifetime_ms for re-authentication (KIP-368); v2 is flexible (KIP-482).
"""
from kohort.protocol.schema import BYTES, INT16, INT64, STRING, Message, f


class SaslAuthenticateRequest(Message):
    API_KEY = 36
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("auth_bytes", BYTES),
    ]


class SaslAuthenticateResponse(Message):
    API_KEY = 36
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("auth_bytes", BYTES),
        f("session_lifetime_ms", INT64, "1+"),
    ]

