"""A minimal blocking client for tests: one socket, kohort's framing, one request at a time.

Lets protocol-level tests talk to a real broker before (and independently of) kohort.client."""
import socket

from kohort.protocol.framing import ClientProtocol, pick_version
from kohort.protocol.messages.api_versions import ApiVersionsRequest


class RawClient:
    def __init__(self, addr: str, client_id: str = "kohort-test"):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.proto = ClientProtocol(client_id)
        resp = self.request(ApiVersionsRequest(client_software_name="kohort-test",
                                               client_software_version="0"), 3)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def request(self, req, version=None):
        if version is None:
            version = pick_version(type(req).API_KEY, self.versions)
        _, data = self.proto.send_request(req, version)
        self.sock.sendall(data)
        while True:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            got = self.proto.receive_data(chunk)
            if got:
                return got[0].response

    def close(self):
        self.sock.close()
