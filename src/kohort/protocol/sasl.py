"""SASL mechanisms, sans I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677, KIP-84).

Both sides live here so the client and the broker share one implementation of the message formats
and the key derivation: `PlainServer`/`ScramServer` (broker) and `plain_initial`/`ScramClient`
(client). No sockets, no clocks, no logging of secrets. As Kafka: no SASLprep, only gs2 `n` (no
channel binding), the authzid must be empty or equal the user, SCRAM iterations 4096-16384, names
escaped `,`->`=2C` and `=`->`=3D`; every secret comparison is constant time (hmac.compare_digest).
Failures raise SaslFailure with a message that names no secret; SCRAM's messages do not tell a
wrong password from an unknown user.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import re
from dataclasses import dataclass

from kohort.errors import KohortError

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384


class SaslFailure(KohortError):
    """Authentication failed (SASL_AUTHENTICATION_FAILED on the wire)."""


# -- PLAIN ----------------------------------------------------------------------------------------
def plain_initial(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


class PlainServer:
    """One PLAIN exchange against `users` (name -> password, from the JAAS user_NAME options)."""

    def __init__(self, users: dict[str, str]):
        self.users = users
        self.principal: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        expected = self.users.get(user)
        # compare against something of the same shape even for an unknown user (no timing oracle)
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" * 64).encode())
        if expected is None or not ok:
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.principal = user
        return b"", True


# -- SCRAM ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScramCredential:
    """What a SCRAM server stores per (user, mechanism): never the password."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        b = lambda x: base64.b64encode(x).decode()    # noqa: E731
        return {"salt": b(self.salt), "stored_key": b(self.stored_key), "server_key": b(self.server_key),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, d: dict) -> "ScramCredential":
        return cls(base64.b64decode(d["salt"]), base64.b64decode(d["stored_key"]),
                   base64.b64decode(d["server_key"]), int(d["iterations"]))


def _h(mech: str) -> str:
    try:
        return SCRAM_MECHANISMS[mech]
    except KeyError:
        raise KohortError(f"unknown SCRAM mechanism {mech!r}; expected one of "
                          f"{', '.join(SCRAM_MECHANISMS)}") from None


def salted_password(mech: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_h(mech), password.encode("utf-8"), salt, iterations)


def credential_from_salted(mech: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    h = _h(mech)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return ScramCredential(salt, hashlib.new(h, client_key).digest(), server_key, iterations)


def make_credential(mech: str, password: str, iterations: int = 4096, salt: bytes | None = None) -> ScramCredential:
    if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        raise KohortError(f"SCRAM iterations must be {SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS}, "
                          f"got {iterations}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mech, salted_password(mech, password, salt, iterations), salt, iterations)


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i:i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise SaslFailure("Invalid SCRAM username encoding")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _attrs(msg: str) -> dict[str, str]:
    out = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslFailure("Invalid SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


def _nonce() -> str:
    """130 random bits in base 36, as Kafka's ScramFormatter: only [0-9a-z]. (librdkafka 2.0.2 mangles
    a nonce with base64's '+' or '/' and then fails the nonce check.)"""
    n, out = secrets.randbits(130), []
    while n:
        n, d = divmod(n, 36)
        out.append("0123456789abcdefghijklmnopqrstuvwxyz"[d])
    return "".join(out) or "0"


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final.
    `lookup(user) -> ScramCredential | None`."""

    def __init__(self, mech: str, lookup):
        self.mech, self.h, self.lookup = mech, _h(mech), lookup
        self.principal: str | None = None
        self._state = 0
        self._cred: ScramCredential | None = None
        self._nonce = self._first_bare = self._server_first = ""

    def step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            msg = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SCRAM message: not UTF-8") from None
        if self._state == 0:
            return self._client_first(msg), False
        if self._state == 1:
            return self._client_final(msg), True
        raise SaslFailure("Invalid SCRAM exchange: unexpected message")

    def _client_first(self, msg: str) -> bytes:
        parts = msg.split(",", 2)
        if len(parts) != 3 or parts[0] != "n":
            raise SaslFailure("Invalid SCRAM client-first message (only gs2 'n' is supported)")
        authzid = parts[1]
        self._first_bare = parts[2]
        a = _attrs(self._first_bare)
        if "n" not in a or "r" not in a or not a["r"]:
            raise SaslFailure("Invalid SCRAM client-first message")
        user = _unescape(a["n"])
        if authzid and (not authzid.startswith("a=") or _unescape(authzid[2:]) != user):
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        cred = self.lookup(user) if user else None
        if cred is None or cred.iterations < SCRAM_MIN_ITERATIONS:
            raise SaslFailure("Authentication failed during authentication due to invalid credentials "
                              f"with SASL mechanism {self.mech}")
        self._cred, self._user = cred, user
        self._nonce = a["r"] + _nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                              f"i={cred.iterations}")
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, msg: str) -> bytes:
        self._state = 2
        head, sep, proof_part = msg.rpartition(",p=")
        if not sep:
            raise SaslFailure("Invalid SCRAM client-final message")
        a = _attrs(head)
        if a.get("c") != "biws":      # base64("n,,"): no channel binding, no authzid
            if a.get("c") is None or base64.b64decode(a["c"] + "==")[:2] != b"n,":
                raise SaslFailure("Invalid SCRAM client-final message: channel binding")
        # exact nonce equality (CVE-2024-56128)
        if not hmac.compare_digest(a.get("r", "").encode(), self._nonce.encode()):
            raise SaslFailure("Invalid SCRAM client-final message: nonce mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise SaslFailure("Invalid SCRAM client proof") from None
        cred = self._cred
        auth_msg = f"{self._first_bare},{self._server_first},{head}".encode()
        client_sig = hmac.new(cred.stored_key, auth_msg, self.h).digest()
        if len(proof) != len(client_sig):
            raise SaslFailure(f"Authentication failed during authentication due to invalid credentials "
                              f"with SASL mechanism {self.mech}")
        client_key = _xor(client_sig, proof)
        if not hmac.compare_digest(hashlib.new(self.h, client_key).digest(), cred.stored_key):
            raise SaslFailure("Authentication failed during authentication due to invalid credentials "
                              f"with SASL mechanism {self.mech}")
        self.principal = self._user
        server_sig = hmac.new(cred.server_key, auth_msg, self.h).digest()
        return b"v=" + base64.b64encode(server_sig)


class ScramClient:
    """Client side: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, mech: str, username: str, password: str, nonce: str | None = None):
        self.mech, self.h = mech, _h(mech)
        self.username, self.password = username, password
        self._cnonce = nonce or _nonce()
        self._first_bare = f"n={_escape(username)},r={self._cnonce}"
        self._server_sig = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            sf = bytes(server_first).decode("utf-8")
            a = _attrs(sf)
            nonce, salt, iterations = a["r"], base64.b64decode(a["s"]), int(a["i"])
        except (KeyError, ValueError, UnicodeDecodeError):
            raise SaslFailure("Invalid SCRAM server-first message") from None
        if not nonce.startswith(self._cnonce) or len(nonce) == len(self._cnonce):
            raise SaslFailure("Invalid SCRAM server-first message: the server nonce does not extend ours")
        if iterations < SCRAM_MIN_ITERATIONS:
            raise SaslFailure(f"SCRAM iterations {iterations} below {SCRAM_MIN_ITERATIONS}")
        salted = salted_password(self.mech, self.password, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.h).digest()
        stored_key = hashlib.new(self.h, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_msg = f"{self._first_bare},{sf},{without_proof}".encode()
        proof = _xor(client_key, hmac.new(stored_key, auth_msg, self.h).digest())
        server_key = hmac.new(salted, b"Server Key", self.h).digest()
        self._server_sig = hmac.new(server_key, auth_msg, self.h).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        try:
            a = _attrs(bytes(server_final).decode("utf-8"))
        except UnicodeDecodeError:
            a = {}
        if "e" in a:
            raise SaslFailure(f"SCRAM authentication failed: {a['e']}")
        try:
            sig = base64.b64decode(a.get("v", ""), validate=True)
        except ValueError:
            sig = b""
        if not hmac.compare_digest(sig, self._server_sig):
            raise SaslFailure("SCRAM server signature does not verify: not the server we know")


class SaslClient:
    """The client's side of one exchange for any supported mechanism: `initial()` is the first
    token; `respond(server_token)` gives the next one, or None once the exchange is complete."""

    def __init__(self, mechanism: str, username: str, password: str):
        self.mechanism = mechanism.upper()
        if self.mechanism not in MECHANISMS:
            raise KohortError(f"SASL mechanism {mechanism!r} is not supported; kohort has {', '.join(MECHANISMS)}")
        self._plain = plain_initial(username, password) if self.mechanism == "PLAIN" else None
        self._scram = None if self._plain is not None else ScramClient(self.mechanism, username, password)
        self._step = 0

    def initial(self) -> bytes:
        return self._plain if self._plain is not None else self._scram.first()

    def respond(self, server_token: bytes) -> bytes | None:
        self._step += 1
        if self._plain is not None:
            return None
        if self._step == 1:
            return self._scram.final(server_token)
        self._scram.verify(server_token)
        return None


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """`<LoginModule class> required k="v" ...;` -> (module, options)."""
    text = text.strip().rstrip(";").strip()
    m = re.match(r"([\w.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if not m:
        raise KohortError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
    opts = {}
    for k, quoted, bare in re.findall(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))', text[m.end():]):
        opts[k] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return m.group(1), opts
