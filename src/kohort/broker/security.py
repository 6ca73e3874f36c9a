"""Broker security: listeners, TLS contexts, SASL users, the per-connection SASL state machine.

Configured by Kafka's names: `listeners` (NAME://HOST:PORT,...), `listener.security.protocol.map`
(NAME:PROTOCOL; a listener named after its protocol needs no entry), `sasl.enabled.mechanisms`,
`[listener.name.<l>.][<mech>.]sasl.jaas.config` (PlainLoginModule `user_NAME="pw"` options),
`ssl.keystore.type=PEM` with `ssl.keystore.location` (key + chain in one PEM) or
`ssl.keystore.key` + `ssl.keystore.certificate.chain`, `ssl.truststore.*` (PEM), `ssl.client.auth`,
`ssl.principal.mapping.rules` (KIP-371: an SSL client certificate's DN -> principal name).
Any ssl.*/sasl.* key may be prefixed `listener.name.<l>.` for one listener (KIP-103).
OAUTHBEARER (KIP-255) validates unsecured JWTs (alg=none) as Kafka's default
OAuthBearerUnsecuredValidatorCallbackHandler, configured by the `unsecuredValidator*` options of
`[listener.name.<l>.]oauthbearer.sasl.jaas.config` (OAuthBearerLoginModule); the principal is the
token's `sub` claim (or unsecuredValidatorPrincipalClaimName). Tests only: a production validator (JWKS,
KIP-768) is not implemented, and `oauthbearer.sasl.server.callback.handler.class` naming any other class
is refused.

Re-authentication (KIP-368): a session's lifetime is the smaller of `connections.max.reauth.ms` (if > 0;
also `listener.name.<l>.[<mech>.]connections.max.reauth.ms`) and an OAUTHBEARER token's remaining life
(as Kafka, which ends OAUTHBEARER sessions at token expiry even with connections.max.reauth.ms=0), sent
in SaslAuthenticate v1+. A SaslHandshake on an authenticated connection with a lifetime starts a
re-authentication (same mechanism, same principal, at most one per second); once the session is over,
any other request closes the connection.

SCRAM credentials (salt, StoredKey, ServerKey, iterations; never a password) live in
`<data dir>/scram-credentials.json`, written atomically (temp file, fsync, rename); the broker rereads
it when it changes, so `kohort users` takes effect at the next login.

`Authenticator` is the sans-I/O SASL server of one connection, as Kafka's SaslServerAuthenticator:
before authentication only ApiVersions (once) and SaslHandshake (v0: raw tokens follow; v1:
SaslAuthenticate requests) are allowed; anything else closes the connection. Authorization (ACLs) is
not implemented yet: the principal is only recorded on the connection.
"""
from __future__ import annotations

import json
import os
import re
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field

from kohort.errors import ErrorCode, KohortError
from kohort.storage.fs import write_json_atomic
from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from kohort.protocol.messages.sasl_handshake import SaslHandshakeResponse
from kohort.protocol.sasl import (
    MECHANISMS, SCRAM_MECHANISMS, UNSECURED_VALIDATOR, OAuthBearerServer, PlainServer, SaslFailure,
    ScramCredential, ScramServer, UnsecuredValidator, parse_jaas,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ANONYMOUS = "User:ANONYMOUS"
SCRAM_FILE = "scram-credentials.json"


class SecurityConfigError(KohortError, ValueError):
    pass


@dataclass
class Listener:
    name: str
    protocol: str
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict = field(default_factory=dict)
    oauth: UnsecuredValidator | None = None
    principal_mapper: PrincipalMapper | None = None      # ssl.principal.mapping.rules (SSL listeners)
    max_reauth_ms: dict = field(default_factory=dict)    # mechanism -> connections.max.reauth.ms (KIP-368)
    advertised: tuple[str, int] | None = None   # set once bound

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def parse_listeners(value: str, protocol_map: str) -> list[tuple[str, str, str, int]]:
    """-> [(name, protocol, host, port)] from `listeners` and `listener.security.protocol.map`."""
    pmap = {}
    for entry in filter(None, (e.strip() for e in protocol_map.split(","))):
        name, sep, proto = entry.partition(":")
        if not sep or proto.strip().upper() not in PROTOCOLS:
            raise SecurityConfigError(f"listener.security.protocol.map: bad entry {entry!r} "
                                      f"(expected NAME:{'|'.join(PROTOCOLS)})")
        pmap[name.strip().upper()] = proto.strip().upper()
    out, seen = [], set()
    for entry in filter(None, (e.strip() for e in value.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)", entry)
        if not m:
            raise SecurityConfigError(f"listeners: expected NAME://HOST:PORT, got {entry!r}")
        name = m.group(1).upper()
        proto = pmap.get(name, name if name in PROTOCOLS else None)
        if proto is None:
            raise SecurityConfigError(f"listeners: {name} has no entry in listener.security.protocol.map "
                                      f"and is not a protocol name ({', '.join(PROTOCOLS)})")
        if name in seen:
            raise SecurityConfigError(f"listeners: {name} given twice")
        seen.add(name)
        out.append((name, proto, m.group(2).strip("[]") or "0.0.0.0", int(m.group(3))))
    if not out:
        raise SecurityConfigError("listeners: empty")
    return out


def setting(config, listener: str, key: str, default=None):
    """`listener.name.<l>.<key>` if set, else `<key>`."""
    v = config.get(f"listener.name.{listener.lower()}.{key}")
    if v is None or v == "":
        v = config.get(key)
    return default if v is None or v == "" else v


def _plain_users(config, listener: str) -> dict[str, str]:
    jaas = setting(config, listener, "plain.sasl.jaas.config") or setting(config, listener, "sasl.jaas.config")
    if not jaas:
        raise SecurityConfigError(f"listener {listener}: PLAIN is enabled but no sasl.jaas.config "
                                  f"(listener.name.{listener.lower()}.plain.sasl.jaas.config) lists users")
    try:
        module, opts = parse_jaas(jaas)
    except KohortError as e:
        raise SecurityConfigError(f"listener {listener}: {e}") from None
    if not module.endswith("PlainLoginModule"):
        raise SecurityConfigError(f"listener {listener}: PLAIN needs PlainLoginModule, got {module}")
    return {k[5:]: v for k, v in opts.items() if k.startswith("user_")}


def _oauth_validator(config, listener: str) -> UnsecuredValidator:
    handler = setting(config, listener, "oauthbearer.sasl.server.callback.handler.class") or \
        setting(config, listener, "sasl.server.callback.handler.class")
    if handler and handler != UNSECURED_VALIDATOR:
        raise SecurityConfigError(f"listener {listener}: OAUTHBEARER validation by {handler} is not supported; "
                                  f"kohort validates unsecured JWTs only ({UNSECURED_VALIDATOR}, the default)")
    jaas = setting(config, listener, "oauthbearer.sasl.jaas.config") or setting(config, listener, "sasl.jaas.config")
    if not jaas:
        raise SecurityConfigError(f"listener {listener}: OAUTHBEARER is enabled but there is no sasl.jaas.config "
                                  f"(listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config="
                                  "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;)")
    try:
        module, opts = parse_jaas(jaas)
        if not module.endswith("OAuthBearerLoginModule"):
            raise KohortError(f"OAUTHBEARER needs OAuthBearerLoginModule, got {module}")
        return UnsecuredValidator.from_jaas(opts)
    except KohortError as e:
        raise SecurityConfigError(f"listener {listener}: {e}") from None


def _ssl_context(config, listener: str) -> ssl.SSLContext:
    ktype = str(setting(config, listener, "ssl.keystore.type", "JKS")).upper()
    if ktype != "PEM":
        raise SecurityConfigError(f"listener {listener}: ssl.keystore.type={ktype} is not supported; use PEM")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    password = setting(config, listener, "ssl.key.password")
    location = setting(config, listener, "ssl.keystore.location")
    key, chain = setting(config, listener, "ssl.keystore.key"), setting(config, listener,
                                                                       "ssl.keystore.certificate.chain")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif key and chain:
            with tempfile.TemporaryDirectory(prefix="kohort-pem-") as d:
                path = os.path.join(d, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(key.replace("\\n", "\n") + "\n" + chain.replace("\\n", "\n") + "\n")
                ctx.load_cert_chain(path, password=password)
        else:
            raise SecurityConfigError(f"listener {listener}: TLS needs ssl.keystore.location (PEM key + "
                                      "certificate chain) or ssl.keystore.key + ssl.keystore.certificate.chain")
        tloc = setting(config, listener, "ssl.truststore.location")
        tcerts = setting(config, listener, "ssl.truststore.certificates")
        if tloc:
            ctx.load_verify_locations(cafile=tloc)
        elif tcerts:
            ctx.load_verify_locations(cadata=tcerts.replace("\\n", "\n"))
    except (OSError, ssl.SSLError) as e:
        raise SecurityConfigError(f"listener {listener}: cannot load TLS key/certificates: {e}") from None
    auth = str(setting(config, listener, "ssl.client.auth", "none")).lower()
    modes = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    if auth not in modes:
        raise SecurityConfigError(f"ssl.client.auth must be none, requested or required, got {auth!r}")
    if auth != "none" and not (tloc or tcerts):
        raise SecurityConfigError(f"listener {listener}: ssl.client.auth={auth} needs ssl.truststore.location")
    ctx.verify_mode = modes[auth]
    return ctx


def build_listeners(config) -> list[Listener]:
    out = []
    for name, proto, host, port in parse_listeners(config["listeners"], config["listener.security.protocol.map"]):
        lst = Listener(name, proto, host, port)
        if proto in ("SSL", "SASL_SSL"):
            lst.ssl_context = _ssl_context(config, name)
            lst.principal_mapper = PrincipalMapper(setting(config, name, "ssl.principal.mapping.rules"))
        if lst.sasl:
            mechs = [m.strip().upper() for m in
                     str(setting(config, name, "sasl.enabled.mechanisms", "GSSAPI")).split(",") if m.strip()]
            bad = [m for m in mechs if m not in MECHANISMS]
            if bad or not mechs:
                raise SecurityConfigError(f"listener {name}: sasl.enabled.mechanisms {','.join(bad) or '(empty)'} "
                                          f"not supported; kohort has {', '.join(MECHANISMS)}")
            lst.mechanisms = tuple(mechs)
            if "PLAIN" in mechs:
                lst.plain_users = _plain_users(config, name)
            if "OAUTHBEARER" in mechs:
                lst.oauth = _oauth_validator(config, name)
            for m in mechs:
                v = setting(config, name, f"{m.lower()}.connections.max.reauth.ms") or \
                    setting(config, name, "connections.max.reauth.ms") or 0
                try:
                    lst.max_reauth_ms[m] = int(v)
                except ValueError:
                    raise SecurityConfigError(f"listener {name}: connections.max.reauth.ms must be an integer "
                                              f"(milliseconds), got {v!r}") from None
        out.append(lst)
    return out


class PrincipalMapper:
    """`ssl.principal.mapping.rules` (KIP-371), as Kafka's SslPrincipalMapper: a comma-separated list of
    `RULE:<regex>/<replacement>/[L|U]` and `DEFAULT`; the first rule whose regex matches the whole DN
    gives the name (Java's `$1` back references; L/U lower/upper-cases it); DEFAULT keeps the DN; no
    matching rule fails the connection's authentication."""

    _RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
    _SPLIT = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")

    def __init__(self, rules: str | None):
        self.text = rules if rules is not None and rules.strip() else "DEFAULT"
        self.rules = []          # None = DEFAULT, else (compiled regex, replacement, case)
        parts = [m.group(1) for m in self._SPLIT.finditer(self.text.strip()) if m.group(1) or m.group(0)]
        for rule in parts:
            m = re.match(self._RULE, rule)
            if m is None or m.end() != len(rule):
                raise SecurityConfigError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")
            if m.group(1):
                self.rules.append(None)
            elif m.group(2) is not None:
                try:
                    rx = re.compile(m.group(2))
                except re.error as e:
                    raise SecurityConfigError(f"ssl.principal.mapping.rules: bad regex in {rule!r}: {e}") from None
                self.rules.append((rx, m.group(3), m.group(4)))
            elif rule.strip():
                raise SecurityConfigError(f"ssl.principal.mapping.rules: invalid rule {rule!r}")

    @staticmethod
    def _expand(replacement: str, m: re.Match) -> str:
        out, i, groups = [], 0, m.re.groups
        while i < len(replacement):
            c = replacement[i]
            if c == "\\" and i + 1 < len(replacement):
                out.append(replacement[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
                j = i + 1
                n = int(replacement[j])
                if n > groups:                # not a group: a literal "$n", as Kafka escapes it
                    out.append(replacement[i:j + 1])
                    i = j + 1
                    continue
                j += 1
                while j < len(replacement) and replacement[j].isdigit() and n * 10 + int(replacement[j]) <= groups:
                    n = n * 10 + int(replacement[j])
                    j += 1
                out.append(m.group(n) or "")
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def name(self, dn: str) -> str | None:
        for rule in self.rules:
            if rule is None:
                return dn
            rx, repl, case = rule
            if rx.fullmatch(dn):
                result = rx.sub(lambda m: self._expand(repl, m), dn)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        return None


def tls_principal(peercert: dict | None, mapper: PrincipalMapper | None = None) -> str | None:
    """`User:<name>` of a verified client certificate: its RFC 2253 DN (most specific RDN first, as
    Java's X500Principal.getName()) through `mapper` (ssl.principal.mapping.rules); User:ANONYMOUS
    without a certificate; None when no mapping rule applies (the connection must be refused)."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID",
             "streetAddress": "STREET"}

    def esc(v: str) -> str:
        v = re.sub(r'([,+"\\<>;=])', r"\\\1", v)
        return ("\\" + v if v[:1] in "# " and v else v)

    rdns = ["+".join(f"{short.get(k, k)}={esc(v)}" for k, v in rdn) for rdn in peercert["subject"]]
    dn = ",".join(reversed(rdns))
    name = mapper.name(dn) if mapper is not None else dn
    return None if name is None else "User:" + name


# -- SCRAM credential store ----------------------------------------------------------------------
class ScramStore:
    """SCRAM credentials by user and mechanism, kept in `<data dir>/scram-credentials.json`
    (in memory only when there is no data directory)."""

    def __init__(self, data_dir: str | None):
        self.path = os.path.join(data_dir, SCRAM_FILE) if data_dir else None
        self._creds: dict[str, dict[str, ScramCredential]] = {}
        self._stamp = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._creds, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        with open(self.path, encoding="utf-8") as fh:
            raw = json.load(fh)
        self._creds = {u: {m: ScramCredential.from_json(c) for m, c in mechs.items()}
                       for u, mechs in raw.get("users", {}).items()}
        self._stamp = stamp

    def get(self, user: str, mech: str) -> ScramCredential | None:
        with self._lock:
            try:
                self._load()
            except (OSError, ValueError, KeyError):
                return None       # an unreadable store authenticates nobody
            return self._creds.get(user, {}).get(mech)

    def describe(self) -> dict[str, dict[str, int]]:
        with self._lock:
            self._load()
            return {u: {m: c.iterations for m, c in ms.items()} for u, ms in self._creds.items()}

    def upsert(self, user: str, mech: str, cred: ScramCredential) -> None:
        if mech not in SCRAM_MECHANISMS:
            raise KohortError(f"unknown SCRAM mechanism {mech!r}")
        if not user:
            raise KohortError("SCRAM user name must not be empty")
        with self._lock:
            self._load()
            self._creds.setdefault(user, {})[mech] = cred
            self._save()

    def delete(self, user: str, mech: str) -> bool:
        with self._lock:
            self._load()
            if mech not in self._creds.get(user, {}):
                return False
            del self._creds[user][mech]
            if not self._creds[user]:
                del self._creds[user]
            self._save()
            return True

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"users": {u: {m: c.to_json() for m, c in ms.items()} for u, ms in self._creds.items()}}
        write_json_atomic(self.path, data, mode=0o600)
        st = os.stat(self.path)
        self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)


# -- per-connection SASL server ------------------------------------------------------------------
# verdicts of Authenticator
RESPOND, FAIL, CLOSE = "respond", "fail", "close"

START, HANDSHAKE_ONLY, AUTHENTICATE, RAW, DONE = "START", "HANDSHAKE_ONLY", "AUTHENTICATE", "RAW", "DONE"


class Authenticator:
    """SASL server of one connection (sans I/O). `on_request(api_key, version, request)` and
    `on_raw_token(bytes)` return (verdict, response, reason): RESPOND the response; FAIL = respond,
    then close after connection.failed.authentication.delay.ms; CLOSE = close without an answer."""

    def __init__(self, listener: Listener, scram: ScramStore, clock=time.time):
        self.listener, self.scram, self.clock = listener, scram, clock
        self.state = START
        self.principal: str | None = None
        self.mechanism: str | None = None
        self._server = None
        # KIP-368: when the session ends (clock seconds; None = never), whether this is a
        # re-authentication, and when the last one began
        self.session_expiry: float | None = None
        self._reauth: tuple[str, str] | None = None      # (mechanism, principal) being re-proven
        self._last_reauth = None

    @property
    def complete(self) -> bool:
        return self.state == DONE

    @property
    def raw(self) -> bool:
        return self.state == RAW

    def allows_api_versions(self) -> bool:
        return self.state == START

    def on_api_versions(self) -> None:
        self.state = HANDSHAKE_ONLY

    def session_expired(self) -> bool:
        """KIP-368: the session has a lifetime and it is over (only re-authentication may follow)."""
        return self.session_expiry is not None and self.clock() >= self.session_expiry

    def begin_reauthentication(self) -> bool:
        """A SaslHandshake on an authenticated connection (KIP-368): start re-authenticating if the
        session has a lifetime and the last re-authentication began at least 1 s ago, as Kafka's
        KafkaChannel; else False (the handshake is then answered ILLEGAL_SASL_STATE like any late one)."""
        now = self.clock()
        if self.state != DONE or self.session_expiry is None or \
                (self._last_reauth is not None and now - self._last_reauth < 1.0):
            return False
        self._last_reauth = now
        self._reauth = (self.mechanism, self.principal)
        self.state = HANDSHAKE_ONLY
        return True

    def on_request(self, api_key: int, version: int, req):
        if api_key == 17 and self.state in (START, HANDSHAKE_ONLY):
            mech = req.mechanism
            enabled = list(self.listener.mechanisms)
            if self._reauth is not None and (mech != self._reauth[0] or version == 0):
                return (FAIL, SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                    mechanisms=enabled),
                        f"re-authentication with SASL mechanism {mech!r} v{version} on a connection "
                        f"authenticated with {self._reauth[0]}")
            if mech not in enabled:
                return (FAIL, SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                    mechanisms=enabled),
                        f"unsupported SASL mechanism {mech!r}")
            self.mechanism = mech
            if mech == "PLAIN":
                self._server = PlainServer(self.listener.plain_users)
            elif mech == "OAUTHBEARER":
                self._server = OAuthBearerServer(self.listener.oauth, lambda: int(self.clock() * 1000))
            else:
                self._server = ScramServer(mech, lambda user: self.scram.get(user, mech))
            self.state = RAW if version == 0 else AUTHENTICATE
            return RESPOND, SaslHandshakeResponse(error_code=0, mechanisms=enabled), None
        if api_key == 17 and self.state == AUTHENTICATE:
            # a second handshake in the middle of an exchange: Kafka answers ILLEGAL_SASL_STATE, then closes
            return (FAIL, SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                mechanisms=list(self.listener.mechanisms)),
                    "SaslHandshake during SASL authentication")
        if api_key == 36 and self.state == AUTHENTICATE:
            try:
                reply, done = self._server.step(req.auth_bytes)
            except SaslFailure as e:
                return (FAIL, SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                       error_message=str(e), auth_bytes=b"",
                                                       session_lifetime_ms=0), str(e))
            lifetime = 0
            if done:
                if self._reauth is not None and "User:" + self._server.principal != self._reauth[1]:
                    msg = "Cannot change principals during re-authentication"
                    return (FAIL, SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                           error_message=msg, auth_bytes=b"",
                                                           session_lifetime_ms=0), msg)
                lifetime = self._finish()
            return RESPOND, SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=reply,
                                                     session_lifetime_ms=lifetime if version >= 1 else 0), None
        return CLOSE, None, f"api_key {api_key} not allowed in SASL state {self.state}"

    def on_raw_token(self, token: bytes):
        """SaslHandshake v0: a raw token in, a raw token out (size-prefixed, no header)."""
        try:
            reply, done = self._server.step(token)
        except SaslFailure as e:
            return CLOSE, None, str(e)
        if done:
            self._finish()
        return RESPOND, len(reply).to_bytes(4, "big") + reply, None

    def _finish(self) -> int:
        """Authenticated: record the principal and the session's lifetime (KIP-368, as Kafka's
        SaslServerAuthenticator): the smaller of connections.max.reauth.ms (when > 0, per listener and
        mechanism) and the credential's remaining life (OAUTHBEARER: the token's expiry, which Kafka
        enforces even without connections.max.reauth.ms); -> the lifetime in ms (0 = unlimited)."""
        now = self.clock()
        max_reauth = self.listener.max_reauth_ms.get(self.mechanism, 0)
        expiry_ms = getattr(self._server, "expiry_ms", None)
        lifetime = None
        if expiry_ms is not None:
            lifetime = max(0, int(expiry_ms - now * 1000))
        if max_reauth > 0:
            lifetime = max_reauth if lifetime is None else min(lifetime, max_reauth)
        self.session_expiry = None if lifetime is None else now + lifetime / 1000
        self.principal = "User:" + self._server.principal
        self.state = DONE
        self._server = None
        self._reauth = None
        return lifetime or 0
