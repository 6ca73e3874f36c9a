"""SaslHandshake (17) and SaslAuthenticate (36) outside the authentication phase.

While a SASL listener's connection authenticates, the server's `security.Authenticator` answers these
two itself. Here is what every other connection gets, as Kafka's KafkaApis: ILLEGAL_SASL_STATE (on a
PLAINTEXT/SSL listener, or a second handshake after success; re-authentication, KIP-368, is not
served). Registering them also makes ApiVersions advertise them.
"""
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from kohort.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse


@handles(SaslHandshakeRequest, "0-1")
def handle_sasl_handshake(ctx, req):
    mechs = list(ctx.listener.mechanisms) if ctx.listener is not None else []
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechs)


@handles(SaslAuthenticateRequest, "0-2")
def handle_sasl_authenticate(ctx, req):
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate is not allowed in this state: the "
                                    "connection is already authenticated or its listener has no SASL",
                                    auth_bytes=b"", session_lifetime_ms=0)
