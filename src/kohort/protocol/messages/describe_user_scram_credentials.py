"""DescribeUserScramCredentials (API key 50), v0: the SCRAM mechanisms and iteration counts of users
(KIP-554). Flexible from v0. Users null = all users. Mechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
"""
from kohort.protocol.schema import INT8, INT16, INT32, STRING, ArrayOf, Message, f


class DescribeUserScramCredentialsRequest(Message):
    API_KEY = 50
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("users", ArrayOf("UserName", [
            f("name", STRING),
        ]), nullable="0+"),
    ]


class DescribeUserScramCredentialsResponse(Message):
    API_KEY = 50
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("results", ArrayOf("DescribeUserScramCredentialsResult", [
            f("user", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
            f("credential_infos", ArrayOf("CredentialInfo", [
                f("mechanism", INT8),
                f("iterations", INT32),
            ])),
        ])),
    ]
