"""SASL mechanisms, sans I/O: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677, KIP-84) and
OAUTHBEARER (RFC 7628, KIP-255, extensions KIP-342).

Both sides live here so the client and the broker share one implementation of the message formats
and the key derivation: `PlainServer`/`ScramServer`/`OAuthBearerServer` (broker) and
`plain_initial`/`ScramClient`/`OAuthTokenSource` (client). No sockets, no clocks (the callers pass
theirs), no logging of secrets or tokens. As Kafka: no SASLprep, only gs2 `n` (no channel binding), the authzid must be empty or equal the user, SCRAM iterations 4096-16384, names
escaped `,`->`=2C` and `=`->`=3D`; every secret comparison is constant time (hmac.compare_digest).
Failures raise SaslFailure with a message that names no secret; SCRAM's messages do not tell a
wrong password from an unknown user.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass

from kohort.errors import KohortError

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
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
    token; `respond(server_token)` gives the next one, or None once the exchange is complete.
    OAUTHBEARER takes `oauth` (an OAuthTokenSource) instead of a user name and password."""

    def __init__(self, mechanism: str, username: str | None = None, password: str | None = None,
                 oauth: "OAuthTokenSource | None" = None):
        self.mechanism = mechanism.upper()
        if self.mechanism not in MECHANISMS:
            raise KohortError(f"SASL mechanism {mechanism!r} is not supported; kohort has {', '.join(MECHANISMS)}")
        self._plain = plain_initial(username, password) if self.mechanism == "PLAIN" else None
        self._scram = (ScramClient(self.mechanism, username, password)
                       if self.mechanism in SCRAM_MECHANISMS else None)
        self._oauth = oauth
        if self.mechanism == "OAUTHBEARER" and oauth is None:
            raise KohortError("SASL mechanism OAUTHBEARER needs a token source")
        self.server_error: str | None = None     # OAUTHBEARER: the server's JSON error status
        self._step = 0

    def initial(self) -> bytes:
        if self._plain is not None:
            return self._plain
        if self._scram is not None:
            return self._scram.first()
        try:
            return oauth_initial(self._oauth.current())
        except SaslFailure as e:      # no token to send: fatal for the client, like a refusal
            from kohort.errors import ErrorCode, for_code
            raise for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)(f"OAUTHBEARER: {e}") from None

    def respond(self, server_token: bytes) -> bytes | None:
        self._step += 1
        if self._plain is not None:
            return None
        if self._oauth is not None:
            if not server_token:
                return None
            # RFC 7628 3.2.2: an error challenge (JSON); answer %x01, the server then fails the exchange
            self.server_error = bytes(server_token).decode("utf-8", "replace")
            return b"\x01"
        if self._step == 1:
            return self._scram.final(server_token)
        self._scram.verify(server_token)
        return None


# -- OAUTHBEARER ----------------------------------------------------------------------------------
OAUTH_SEP = "\x01"
_OAUTH_KEY = re.compile(r"[A-Za-z]+")
_OAUTH_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_OAUTH_TOKEN = re.compile(r"[-_.a-zA-Z0-9]+")
_SASLNAME = r"(?:[\x01-\x7F&&[^=,]]|=2C|=3D)+"
UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                       "OAuthBearerUnsecuredValidatorCallbackHandler")


@dataclass(frozen=True)
class OAuthToken:
    """A bearer token as the client holds it: the compact JWS, its expiry (seconds since the epoch),
    the principal it names (informational) and the SASL extensions (KIP-342) to send with it."""
    value: str
    expiry: float
    principal: str = ""
    extensions: tuple = ()           # ((name, value), ...)


def oauth_initial(token: OAuthToken) -> bytes:
    """The client's initial response (RFC 7628 3.1): `n,,^Aauth=Bearer <token>^A[k=v^A...]^A`."""
    if not _OAUTH_TOKEN.fullmatch(token.value):
        raise SaslFailure("the OAUTHBEARER token is not a compact JWS (only [-_.a-zA-Z0-9] are allowed)")
    ext = ""
    for k, v in token.extensions:
        if k == "auth" or not _OAUTH_KEY.fullmatch(k) or not _OAUTH_VALUE.fullmatch(v):
            raise SaslFailure(f"invalid SASL extension {k!r} (names are letters only, 'auth' is reserved)")
        ext += f"{OAUTH_SEP}{k}={v}"
    return f"n,,{OAUTH_SEP}auth=Bearer {token.value}{ext}{OAUTH_SEP}{OAUTH_SEP}".encode()


def _b64url_json(obj) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _b64url_decode(part: str) -> bytes:
    part = part.replace("-", "+").replace("_", "/")
    return base64.b64decode(part + "=" * (-len(part) % 4), validate=True)


@dataclass(frozen=True)
class UnsecuredTokenSpec:
    """What an unsecured (alg=none) JWT for tests is made of: librdkafka's `sasl.oauthbearer.config`
    ("principal=alice scope=a,b lifeSeconds=600 extension_x=1") or Java's OAuthBearerLoginModule
    options (unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",a,b" ...)."""
    principal: str
    principal_claim: str = "sub"
    scope: tuple = ()
    scope_claim: str = "scope"
    life_seconds: int = 3600
    claims: tuple = ()               # other claims ((name, value), ...)
    extensions: tuple = ()

    @classmethod
    def from_librdkafka(cls, text: str) -> "UnsecuredTokenSpec":
        kv = {}
        for item in (text or "").split():
            k, sep, v = item.partition("=")
            if not sep:
                raise KohortError(f"sasl.oauthbearer.config: expected key=value, got {item!r}")
            kv[k] = v
        ext = tuple((k[len("extension_"):], v) for k, v in kv.items() if k.startswith("extension_"))
        bad = [k for k in kv if not k.startswith("extension_") and k not in
               ("principal", "principalClaimName", "scope", "scopeClaimName", "lifeSeconds")]
        if bad:
            raise KohortError(f"sasl.oauthbearer.config: unknown key(s) {', '.join(bad)} (principal, "
                              "principalClaimName, scope, scopeClaimName, lifeSeconds, extension_NAME)")
        if not kv.get("principal"):
            raise KohortError("sasl.oauthbearer.config needs principal=NAME for the unsecured JWT")
        try:
            life = int(kv.get("lifeSeconds", 3600))
        except ValueError:
            raise KohortError("sasl.oauthbearer.config: lifeSeconds must be an integer") from None
        if life <= 0:
            raise KohortError("sasl.oauthbearer.config: lifeSeconds must be positive")
        return cls(kv["principal"], kv.get("principalClaimName", "sub"),
                   tuple(s for s in kv.get("scope", "").split(",") if s), kv.get("scopeClaimName", "scope"),
                   life, (), ext)

    @classmethod
    def from_jaas(cls, opts: dict[str, str]) -> "UnsecuredTokenSpec":
        pre = "unsecuredLogin"
        pclaim = opts.get(pre + "PrincipalClaimName", "").strip() or "sub"
        sclaim = opts.get(pre + "ScopeClaimName", "").strip() or "scope"
        claims, ext = {}, []
        for k, v in opts.items():
            if k.startswith(pre + "StringClaim_"):
                claims[k[len(pre + "StringClaim_"):]] = v
            elif k.startswith(pre + "NumberClaim_"):
                try:
                    claims[k[len(pre + "NumberClaim_"):]] = float(v) if "." in v else int(v)
                except ValueError:
                    raise KohortError(f"sasl.jaas.config: {k} must be a number") from None
            elif k.startswith(pre + "ListClaim_"):     # the first character is the delimiter
                claims[k[len(pre + "ListClaim_"):]] = [x for x in v[1:].split(v[:1])] if v else []
            elif k.startswith(pre + "Extension_"):
                ext.append((k[len(pre + "Extension_"):], v))
        principal = claims.pop(pclaim, None)
        if not isinstance(principal, str) or not principal.strip():
            raise KohortError(f"sasl.jaas.config: OAuthBearerLoginModule needs "
                              f"{pre}StringClaim_{pclaim}=\"<principal>\" for the unsecured JWT")
        scope = claims.pop(sclaim, ())
        scope = (scope,) if isinstance(scope, str) else tuple(scope)
        try:
            life = int(opts.get(pre + "LifetimeSeconds", 3600))
        except ValueError:
            raise KohortError(f"sasl.jaas.config: {pre}LifetimeSeconds must be an integer") from None
        for reserved in ("iat", "exp"):
            claims.pop(reserved, None)
        return cls(principal, pclaim, scope, sclaim, life, tuple(claims.items()), tuple(ext))

    def make(self, now: float) -> OAuthToken:
        claims = {self.principal_claim: self.principal, "iat": int(now), "exp": int(now) + self.life_seconds}
        if self.scope:
            claims[self.scope_claim] = list(self.scope)
        claims.update(dict(self.claims))
        value = f"{_b64url_json({'alg': 'none'})}.{_b64url_json(claims)}."
        return OAuthToken(value, float(claims["exp"]), self.principal, self.extensions)


class OAuthTokenSource:
    """The client's OAUTHBEARER tokens: from `fetch()` (a user token callback, librdkafka's
    `oauth_cb(sasl.oauthbearer.config) -> (token, expiry[, principal[, extensions]])`) or from an
    UnsecuredTokenSpec. A token is reused until 80 % of its lifetime has passed (as librdkafka
    refreshes), then fetched again for the next connection. `clock` gives seconds since the epoch."""

    def __init__(self, fetch, clock):
        self._fetch, self._clock = fetch, clock
        self._token: OAuthToken | None = None
        self._refresh_at = 0.0

    @classmethod
    def from_callback(cls, cb, config_str: str | None, clock) -> "OAuthTokenSource":
        def fetch():
            got = cb(config_str)
            if not isinstance(got, (tuple, list)) or not 2 <= len(got) <= 4:
                raise KohortError("oauth_cb must return (token, expiry_seconds[, principal[, extensions]]), "
                                  f"got {type(got).__name__}")
            value, expiry = got[0], got[1]
            principal = got[2] if len(got) > 2 else ""
            ext = tuple(dict(got[3]).items()) if len(got) > 3 and got[3] else ()
            if not isinstance(value, str) or not value:
                raise KohortError("oauth_cb returned an empty or non-string token")
            return OAuthToken(value, float(expiry), principal or "", ext)
        return cls(fetch, clock)

    @classmethod
    def unsecured(cls, spec: UnsecuredTokenSpec, clock) -> "OAuthTokenSource":
        return cls(lambda: spec.make(clock()), clock)

    def current(self) -> OAuthToken:
        now = self._clock()
        if self._token is None or now >= self._refresh_at:
            try:
                tok = self._fetch()
            except KohortError as e:
                raise SaslFailure(f"OAUTHBEARER token: {e}") from None
            except Exception as e:      # the user's callback: any failure is an authentication failure
                raise SaslFailure(f"OAUTHBEARER token callback failed: {type(e).__name__}: {e}") from None
            if tok.expiry <= now:
                raise SaslFailure(f"OAUTHBEARER token callback returned a token that expired "
                                  f"{now - tok.expiry:.0f} s ago")
            self._token, self._refresh_at = tok, now + 0.8 * (tok.expiry - now)
        return self._token


class OAuthTokenError(Exception):
    """A token the validator refuses: `status` (invalid_token | insufficient_scope), `scope`."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None):
        super().__init__(reason)
        self.status, self.scope = status, scope

    def json(self) -> str:
        # byte for byte what Kafka's OAuthBearerSaslServer sends
        out = f'{{"status":"{self.status}"'
        if self.scope is not None:
            out += f', "scope":"{self.scope}"'
        return out + "}"


@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: the JAAS options
    unsecuredValidator{PrincipalClaimName, ScopeClaimName, RequiredScope, AllowableClockSkewMs}."""
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, opts: dict[str, str]) -> "UnsecuredValidator":
        pre = "unsecuredValidator"
        skew = opts.get(pre + "AllowableClockSkewMs", "").strip() or "0"
        try:
            skew_ms = int(skew)
        except ValueError:
            raise KohortError(f"{pre}AllowableClockSkewMs must be an integer, got {skew!r}") from None
        if skew_ms < 0:
            raise KohortError(f"{pre}AllowableClockSkewMs must not be negative, got {skew_ms}")
        return cls(opts.get(pre + "PrincipalClaimName", "").strip() or "sub",
                   opts.get(pre + "ScopeClaimName", "").strip() or "scope",
                   tuple(opts.get(pre + "RequiredScope", "").split()), skew_ms)

    def validate(self, token: str, now_ms: int) -> tuple[str, float]:
        """-> (principal, expiry in ms), or OAuthTokenError. The checks and their order are
        OAuthBearerUnsecuredJws's and the validator's: three dot-separated parts, base64url JSON
        objects, alg=none, no signature, exp a number, the principal claim a non-blank string, iat
        (if any) not in the future, not expired, exp after iat, every required scope present."""
        if ".." in token:
            raise OAuthTokenError("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise OAuthTokenError("Unsecured JWS compact serializations must have 3 dot-separated "
                                  "Base64URL-encoded values")
        try:
            header, claims = (json.loads(_b64url_decode(p)) for p in parts[:2])
        except (ValueError, UnicodeDecodeError):
            raise OAuthTokenError("malformed Base64 URL encoded value or JSON") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise OAuthTokenError("malformed JSON")
        if header.get("alg") != "none":
            raise OAuthTokenError("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise OAuthTokenError("Unsecured JWS must not contain a digital signature")

        def number(name):
            v = claims.get(name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise OAuthTokenError(f"The '{name}' claim was not of type Number")
            return v

        raw_scope = claims.get(self.scope_claim)
        if isinstance(raw_scope, str):
            scope = {raw_scope.strip()} if raw_scope.strip() else set()   # one element, as Kafka
        elif isinstance(raw_scope, list):
            scope = {str(x).strip() for x in raw_scope if str(x).strip()}
        elif raw_scope is None:
            scope = set()
        else:
            raise OAuthTokenError(f"The '{self.scope_claim}' claim was not of type List")
        exp = number("exp")
        if exp is None:
            raise OAuthTokenError("No expiration time in JWT")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise OAuthTokenError(f"No principal name in JWT claim: {self.principal_claim}")
        iat = number("iat")
        if iat is not None and 1000 * iat > now_ms + self.clock_skew_ms:
            raise OAuthTokenError("The Issued At value was after the indicated time plus allowable clock skew")
        if now_ms - self.clock_skew_ms >= 1000 * exp:
            raise OAuthTokenError("The token has expired")
        if iat is not None and exp <= iat:
            raise OAuthTokenError("The Expiration Time time was not after the Issued At time")
        for s in self.required_scope:
            if s not in scope:
                raise OAuthTokenError(f"The provided scope was missing a required scope ({s})",
                                      "insufficient_scope", "[" + ", ".join(self.required_scope) + "]")
        return principal, 1000.0 * exp


class OAuthBearerServer:
    """One OAUTHBEARER exchange (RFC 7628): the client's initial response in; an empty reply on
    success, else the JSON error status (not yet a failure: RFC 7628 3.2.2) after which the client
    must send %x01 and the exchange fails with that JSON as the message, as Kafka's
    OAuthBearerSaslServer. `now_ms()` is the clock the expiry is checked against. Extensions are
    accepted (Kafka's unsecured validator accepts every one)."""

    _INITIAL = re.compile(r"n,(?:a=(?P<authzid>(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,"
                          r"\x01(?P<kv>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")

    def __init__(self, validator: UnsecuredValidator, now_ms):
        self.validator, self.now_ms = validator, now_ms
        self.principal: str | None = None
        self.expiry_ms: float | None = None
        self.extensions: dict[str, str] = {}
        self._error: str | None = None
        self._done = False

    def step(self, token: bytes) -> tuple[bytes, bool]:
        token = bytes(token)
        if self._done:
            raise SaslFailure("Invalid OAUTHBEARER exchange: unexpected message")
        if self._error is not None:
            self._done = True
            raise SaslFailure(self._error)     # the %x01 after our error (or anything else)
        try:
            msg = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid OAUTHBEARER client first message") from None
        m = self._INITIAL.fullmatch(msg)
        if not m:
            raise SaslFailure("Invalid OAUTHBEARER client first message")
        props = dict(kv.split("=", 1) for kv in m.group("kv").split(OAUTH_SEP) if kv)
        auth = props.pop("auth", None)
        if auth is None:
            raise SaslFailure("Invalid OAUTHBEARER client first message: 'auth' not specified")
        am = re.fullmatch(r"(\w+) +([-_.a-zA-Z0-9]+)", auth)
        if not am:
            raise SaslFailure("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if am.group(1).lower() != "bearer":
            raise SaslFailure(f"Invalid scheme in OAUTHBEARER client first message: {am.group(1)}")
        try:
            principal, expiry_ms = self.validator.validate(am.group(2), self.now_ms())
        except OAuthTokenError as e:
            self._error = e.json()
            return self._error.encode(), False
        authzid = m.group("authzid")
        if authzid and authzid != principal:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from the token's principal name")
        self.principal, self.expiry_ms, self.extensions = principal, expiry_ms, props
        self._done = True
        return b"", True


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
