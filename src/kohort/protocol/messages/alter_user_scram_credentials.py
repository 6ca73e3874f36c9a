"""AlterUserScramCredentials (API key 51), v0: delete and upsert users' SCRAM credentials (KIP-554).
Flexible from v0. The client derives the salted password (PBKDF2); the server never sees the password.
Mechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
"""
from kohort.protocol.schema import BYTES, INT8, INT16, INT32, STRING, ArrayOf, Message, f


class AlterUserScramCredentialsRequest(Message):
    API_KEY = 51
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("deletions", ArrayOf("ScramCredentialDeletion", [
            f("name", STRING),
            f("mechanism", INT8),
        ])),
        f("upsertions", ArrayOf("ScramCredentialUpsertion", [
            f("name", STRING),
            f("mechanism", INT8),
            f("iterations", INT32),
            f("salt", BYTES),
            f("salted_password", BYTES),
        ])),
    ]


class AlterUserScramCredentialsResponse(Message):
    API_KEY = 51
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("results", ArrayOf("AlterUserScramCredentialsResult", [
            f("user", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
        ])),
    ]
