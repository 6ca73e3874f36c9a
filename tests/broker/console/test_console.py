"""The broker's web console (issue 18) against a real kohort broker (`--console`), real consumers and
Debian's headless Chromium driven by Selenium (chromedriver from Debian's chromium-driver).

One broker for the module: topic `orders` (3 partitions, 300 records), a classic group (kohort's
consumer; a second member joins and leaves) and a KIP-848 group (confluent-kafka with
group.protocol=consumer), both committed at 300, then 60 more records so each partition lags by 20.
The JSON API and the page must show the topics with the broker's offsets, both groups with their
states and members, the same lag as the admin client computes, a lag chart with points and a
rebalance history with the join and the leave and their reasons. Screenshots of each view are taken
(into docs/console-*.png, the README's, with KOHORT_CONSOLE_SCREENSHOTS=docs; else a temp folder).

A missing chromium or chromedriver fails these tests (`make setup` installs both from Debian's
packages); it is never a silent skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.brokers import KohortBroker, free_port
from tests.helpers.peers import create_topic, produce

ROOT = Path(__file__).resolve().parents[3]
# where the screenshots go: a temp folder, or docs/ (the README's pictures) with
# KOHORT_CONSOLE_SCREENSHOTS=docs, so an ordinary run does not rewrite tracked files
_SHOTS = os.environ.get("KOHORT_CONSOLE_SCREENSHOTS")
DOCS = (ROOT / _SHOTS) if _SHOTS else Path(tempfile.gettempdir()) / "kohort-console-screenshots"
TOPIC = "orders"
CLASSIC = "orders-classic"
KIP848 = "orders-kip848"
BROKER_CONFIG = {
    "console.lag.sample.ms": 250,
    "group.consumer.min.heartbeat.interval.ms": 500, "group.consumer.heartbeat.interval.ms": 1000,
}


def require_chromium() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver; missing ones fail the test (make setup installs
    them from Debian's packages: apt-get install chromium chromium-driver), never a silent skip."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    assert chromium, "chromium is not installed: `make setup` installs it (apt-get install chromium)"
    assert driver, "chromedriver is not installed: `make setup` installs it (apt-get install chromium-driver)"
    return chromium, driver


def wait_for(cond, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Env:
    def __init__(self, broker: KohortBroker, url: str):
        self.broker, self.url = broker, url
        self.bootstrap = broker.bootstrap

    def api(self, path: str):
        status, body = get(self.url + path)
        assert status == 200, (path, status, body)
        return body

    def group(self, gid: str) -> dict:
        from urllib.parse import quote
        return self.api("/api/group?id=" + quote(gid))


def _lag_by_admin(bootstrap: str, group: str) -> dict:
    """The admin client's lag: Admin.group_lag for a classic group; for a KIP-848 group (which
    Admin.group_lag cannot describe: DescribeGroups answers GROUP_ID_NOT_FOUND for it, as Kafka does)
    the same computation from its committed offsets and ListOffsets(latest)."""
    from kohort.client.admin import Admin, LATEST
    a = Admin({"bootstrap.servers": bootstrap})
    try:
        if group == CLASSIC:
            return {(r.topic, r.partition): r.lag for r in a.group_lag(group)}
        committed = a.list_group_offsets(group, None)
        ends = a.list_offsets({tp: LATEST for tp in committed})
        return {(tp.topic, tp.partition): max(0, ends[tp] - c.offset) for tp, c in committed.items()}
    finally:
        a.close()


@pytest.fixture(scope="module")
def env():
    from confluent_kafka import Consumer as CkConsumer
    from kohort import Consumer
    cport = free_port()
    clients = []
    with KohortBroker(config=BROKER_CONFIG, extra_args=["--console", f"127.0.0.1:{cport}"]) as b:
        try:
            e = Env(b, f"http://127.0.0.1:{cport}")
            assert any(line.startswith(f"kohort console on http://127.0.0.1:{cport}/ (read-only)")
                       for line in b.log_lines), b.log_lines
            assert create_topic(b.bootstrap, TOPIC, 3) == 3
            produce(b.bootstrap, TOPIC, 300, partitions=3)

            conf = {"bootstrap.servers": b.bootstrap, "group.id": CLASSIC, "auto.offset.reset": "earliest",
                    "enable.auto.commit": False}
            c1 = Consumer({**conf, "client.id": "orders-classic-1"})
            clients.append(c1)
            c1.subscribe([TOPIC])
            got = [0]

            def consumed_all():
                got[0] += len(c1.poll(0.2))
                return got[0] >= 300
            wait_for(consumed_all, 60, "the classic member to read 300 records")
            c1.commit()
            # a second member joins (a rebalance), then leaves (LeaveGroup with its reason)
            c2 = Consumer({**conf, "client.id": "orders-classic-2"})
            clients.append(c2)
            c2.subscribe([TOPIC])

            def both_assigned():
                c1.poll(0.05)
                c2.poll(0.05)
                a1, a2 = c1.assignment(), c2.assignment()
                return a1 and a2 and len(a1 | a2) == 3
            wait_for(both_assigned, 60, "both classic members to be assigned")
            c2.close()
            clients.remove(c2)
            wait_for(lambda: c1.poll(0.05) is not None and len(c1.assignment()) == 3, 60,
                     "the remaining classic member to take all partitions")

            ckconf = {"bootstrap.servers": b.bootstrap, "group.id": KIP848, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0}
            ck = CkConsumer({**ckconf, "client.id": "orders-kip848"})
            clients.append(ck)
            ck.subscribe([TOPIC])
            n = [0]

            def ck_consumed_all():
                n[0] += sum(1 for m in ck.consume(500, 0.3) if m.error() is None)
                return n[0] >= 300
            wait_for(ck_consumed_all, 60, "the KIP-848 member to read 300 records")
            ck.commit(asynchronous=False)
            # a second KIP-848 member joins (epoch bump, partitions move), then leaves (epoch -1)
            ck2 = CkConsumer({**ckconf, "client.id": "orders-kip848-2"})
            clients.append(ck2)
            ck2.subscribe([TOPIC])

            def ck_both_assigned():
                ck.consume(100, 0.05)
                ck2.consume(100, 0.05)
                a1, a2 = ck.assignment(), ck2.assignment()
                return a1 and a2 and len({(p.topic, p.partition) for p in a1 + a2}) == 3
            wait_for(ck_both_assigned, 60, "both KIP-848 members to be assigned")
            ck2.close()
            clients.remove(ck2)
            wait_for(lambda: ck.consume(100, 0.05) is not None and len(ck.assignment()) == 3, 60,
                     "the remaining KIP-848 member to take all partitions")
            assert e.group(KIP848)["state"] == "Stable"

            produce(b.bootstrap, TOPIC, 60, partitions=3, start=300)      # 20 more per partition

            def lagging(gid):
                pts = e.group(gid)["lag_history"]
                return len([p for p in pts if p["total"] == 60]) >= 3
            wait_for(lambda: lagging(CLASSIC) and lagging(KIP848), 30, "lag samples of both groups")
            yield e
        finally:
            for c in clients:
                c.close()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium, driver = require_chromium()
    profile = tempfile.TemporaryDirectory(prefix="kohort-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    # the machine's network is closed: no background traffic, no component updates, a fresh profile
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", f"--user-data-dir={profile.name}", "--window-size=1400,1000",
              "--force-device-scale-factor=1"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})     # the page's console messages
    os.environ.setdefault("SE_OFFLINE", "true")      # Selenium Manager must not try to download drivers
    d = webdriver.Chrome(options=opts, service=Service(driver))
    try:
        yield d
    finally:
        d.quit()
        profile.cleanup()


# -- JSON API ------------------------------------------------------------------------------------------
def test_api_topics_show_the_brokers_offsets(env):
    from kohort.client.admin import Admin, EARLIEST, LATEST
    from kohort.structs import TopicPartition
    topics = {t["name"]: t for t in env.api("/api/topics")}
    assert topics["__consumer_offsets"]["internal"] is True
    t = topics[TOPIC]
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
    a = Admin({"bootstrap.servers": env.bootstrap})
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(3)]
        latest = a.list_offsets({tp: LATEST for tp in tps})
        earliest = a.list_offsets({tp: EARLIEST for tp in tps})
    finally:
        a.close()
    for p in t["partitions"]:
        tp = TopicPartition(TOPIC, p["partition"])
        assert p["log_end_offset"] == p["high_watermark"] == p["last_stable_offset"] == latest[tp] == 120
        assert p["log_start_offset"] == earliest[tp] == 0
        assert p["size_bytes"] > 0
    assert t["messages"] == 360


def test_api_groups_states_members_and_lag_match_the_admin_client(env):
    groups = {g["group_id"]: g for g in env.api("/api/groups")}
    c, k = groups[CLASSIC], groups[KIP848]
    assert (c["type"], c["protocol_type"], c["state"], c["members"], c["assignor"]) == (
        "classic", "consumer", "Stable", 1, "range")
    assert c["generation"] >= 3                      # joined, second member, its leave
    assert (k["type"], k["state"], k["members"], k["group_epoch"]) == ("consumer", "Stable", 1, 3)
    assert k["group_epoch"] >= 1 and k["assignment_epoch"] == k["group_epoch"]
    for gid in (CLASSIC, KIP848):
        d = env.group(gid)
        ours = {(o["topic"], o["partition"]): o["lag"] for o in d["offsets"]}
        assert ours == _lag_by_admin(env.bootstrap, gid) == {(TOPIC, p): 20 for p in range(3)}
        assert d["total_lag"] == 60 == groups[gid]["total_lag"]
        assert all(o["committed_offset"] == 100 and o["log_end_offset"] == 120 for o in d["offsets"])
        (m,) = d["members"]
        assert m["client_id"] == ("orders-classic-1" if gid == CLASSIC else "orders-kip848")
        assert m["assignment"] == [{"topic": TOPIC, "partitions": [0, 1, 2]}]
        assert {o["member_id"] for o in d["offsets"]} == {m["member_id"]}
    km = env.group(KIP848)["members"][0]
    assert km["target_assignment"] == km["assignment"] and km["member_state"] == "STABLE"
    assert km["member_epoch"] == k["group_epoch"] and km["protocol"] == "consumer"


def test_api_lag_history_and_rebalance_history_with_reasons(env):
    d = env.group(CLASSIC)
    pts = d["lag_history"]
    assert len(pts) >= 3 and pts[-1]["total"] == 60
    assert pts[-1]["partitions"] == {f"{TOPIC}-{p}": 20 for p in range(3)}
    assert all(a["ts_ms"] < b["ts_ms"] for a, b in zip(pts, pts[1:]))
    ev = d["events"]
    kinds = [e["kind"] for e in ev]
    assert kinds.count("MemberJoined") == 2 and "MemberLeft" in kinds and "RebalanceStarted" in kinds
    joined = [e for e in ev if e["kind"] == "MemberJoined"]
    assert all(e["reason"].startswith(f"Adding new member {e['member_id']} with group instance id null; "
                                      f"client reason: ") for e in joined)
    left = next(e for e in ev if e["kind"] == "MemberLeft")
    assert left["reason"].startswith(f"Member {left['member_id']} has left group through explicit `LeaveGroup` "
                                     f"request; client reason: ")
    assert not left["reason"].endswith("client reason: not provided")
    assert any(e["kind"] == "RebalanceStarted" and f"explicit `LeaveGroup` request for ({left['member_id']}) "
               f"members." in e["reason"] for e in ev)
    k = env.group(KIP848)["events"]
    kk = [e["kind"] for e in k]
    assert kk[:2] == ["GroupCreated", "MemberJoined"] and kk.count("MemberJoined") == 2
    assert "joined the consumer group" in k[1]["reason"] and "client id orders-kip848," in k[1]["reason"]
    left = next(e for e in k if e["kind"] == "MemberLeft")
    assert left["reason"] == f"Member {left['member_id']} left the consumer group"
    bumps = [e for e in k if e["kind"] == "GroupEpochBumped"]
    assert [b["generation"] for b in bumps] == [1, 2, 3]
    assert "client id orders-kip848-2" in bumps[1]["reason"] and left["reason"] in bumps[2]["reason"]


def test_api_is_read_only_by_default_and_rejects_bad_requests(env):
    status, body = post(env.url + f"/api/group/delete?id={CLASSIC}", {})
    assert status == 403 and "read-only" in body["error"]
    status, body = post(env.url + f"/api/group/reset-offsets?id={CLASSIC}", {"to": "earliest"})
    assert status == 403
    assert env.api("/api/groups") and get(env.url + "/api/group?id=no-such-group")[0] == 404
    assert get(env.url + "/api/group")[0] == 400
    assert get(env.url + "/static/../server.py")[0] == 404
    assert get(env.url + "/nope")[0] == 404
    cl = env.api("/api/cluster")
    assert cl["console"]["allow_writes"] is False and cl["coordinator"] == "active"
    assert cl["listeners"][0]["port"] == env.broker.port
    # the event recorder and the lag sampler never failed (they log an ERROR with a traceback)
    assert not [line for line in env.broker.log_lines if "Traceback" in line or " ERROR " in line], env.broker.log_lines


def _raw(env, data: bytes) -> bytes:
    import socket
    port = int(env.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_http_server_refuses_malformed_and_oversized_requests(env):
    assert _raw(env, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _raw(env, b"GET / HTTP/1.1\r\nno-colon-here\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    big = b"POST /api/group/delete?id=x HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n"
    assert _raw(env, big).startswith(b"HTTP/1.1 413 ")
    assert _raw(env, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _raw(env, b"DELETE /api/groups HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    ok = _raw(env, b"GET /api/groups HTTP/1.1\r\nHost: x\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 ") and b"Content-Security-Policy: default-src 'self'" in ok


# -- the page in Chromium ------------------------------------------------------------------------------
def _open(browser, env, frag: str):
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(env.url + "/?refresh=0#" + frag)        # render once: elements stay while read
    WebDriverWait(browser, 30).until(lambda d: d.find_element("tag name", "body").get_attribute("data-loaded"))


def _texts(browser, css: str) -> list[str]:
    return [e.text for e in browser.find_elements("css selector", css)]


def _shot(browser, name: str) -> None:
    DOCS.mkdir(parents=True, exist_ok=True)
    height = 700
    for _ in range(5):       # grow the window until the whole page fits (the window has its own chrome)
        browser.set_window_size(1400, height)
        inner, full = browser.execute_script(
            "return [window.innerHeight, document.documentElement.scrollHeight]")
        if full <= inner or height >= 2400:
            break
        height = min(height + full - inner + 20, 2400)
    assert browser.save_screenshot(str(DOCS / f"console-{name}.png"))
    browser.set_window_size(1400, 1000)


def test_page_topics(env, browser):
    from selenium.webdriver.support.ui import WebDriverWait
    _open(browser, env, "topics")
    rows = browser.find_elements("css selector", f"#topics-table tbody tr[data-topic='{TOPIC}']")
    assert len(rows) == 1 and rows[0].text.split()[:3] == [TOPIC, "3", "360"]
    assert not browser.find_elements("css selector", "#topics-table tbody tr[data-topic='__consumer_offsets']")
    ends = _texts(browser, f"#partitions-table tr[data-topic='{TOPIC}'] td.log-end")
    assert ends == ["120", "120", "120"]
    assert _texts(browser, f"#partitions-table tr[data-topic='{TOPIC}'] td.log-start") == ["0", "0", "0"]
    assert browser.find_element("id", "mode").text == "read-only"
    _shot(browser, "topics")
    browser.find_element("id", "show-internal").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(
        "css selector", "#topics-table tbody tr[data-topic='__consumer_offsets']"))


def test_page_groups(env, browser):
    _open(browser, env, "groups")
    rows = {r.get_attribute("data-group"): r for r in browser.find_elements("css selector", "#groups-table tbody tr")}
    assert {CLASSIC, KIP848} <= set(rows)
    c, k = rows[CLASSIC], rows[KIP848]
    assert c.find_element("css selector", ".state").text == "Stable"
    assert k.find_element("css selector", ".state").text == "Stable"
    assert k.find_element("css selector", ".type").text == "consumer (KIP-848)"
    assert c.find_element("css selector", ".type").text == "classic / consumer"
    assert c.find_element("css selector", ".total-lag").text == "60"
    assert k.find_element("css selector", ".total-lag").text == "60"
    assert c.find_element("css selector", ".members").text == "1"
    _shot(browser, "groups")


@pytest.mark.parametrize("gid", [CLASSIC, KIP848])
def test_page_group_members_lag_chart_and_history(env, browser, gid):
    from selenium.webdriver.support.ui import WebDriverWait
    _open(browser, env, "groups")
    before = browser.find_element("tag name", "body").get_attribute("data-loaded")
    browser.find_element("link text", gid).click()            # navigate as a user does
    # the group page is complete once its render finished (data-loaded moves on); reading rows while the
    # render is still replacing tables gave StaleElementReferenceException on a busy machine
    WebDriverWait(browser, 30).until(lambda d: d.find_element("tag name", "body").get_attribute("data-loaded")
                                     != before and d.find_element("id", "group-id").text == gid
                                     and d.find_elements("css selector", "#members-table tbody tr"))
    assert browser.find_element("id", "group-state").text == "Stable"
    admin = _lag_by_admin(env.bootstrap, gid)
    shown = {}
    for r in browser.find_elements("css selector", "#offsets-table tbody tr"):
        t, _, p = r.get_attribute("data-tp").rpartition("-")
        shown[(t, int(p))] = int(r.find_element("css selector", ".lag").text)
    assert shown == admin == {(TOPIC, p): 20 for p in range(3)}
    (member,) = browser.find_elements("css selector", "#members-table tbody tr")
    assert member.find_element("css selector", ".client-id").text == (
        "orders-classic-1" if gid == CLASSIC else "orders-kip848")
    assert member.find_element("css selector", ".assignment").text == f"{TOPIC}-[0,1,2]"
    if gid == KIP848:
        assert member.find_element("css selector", ".target").text == f"{TOPIC}-[0,1,2]"
    chart = browser.find_element("id", "lag-chart")
    WebDriverWait(browser, 20).until(lambda d: int(chart.get_attribute("data-points") or 0) >= 3)
    assert len(chart.find_elements("css selector", "circle.point[data-series='total']")) >= 3
    assert {e.get_attribute("data-series") for e in chart.find_elements("css selector", "polyline")} == {
        "total", *(f"{TOPIC}-{p}" for p in range(3))}
    kinds = _texts(browser, "#events-table tbody td.kind")
    reasons = _texts(browser, "#events-table tbody td.reason")
    assert "MemberJoined" in kinds
    if gid == CLASSIC:
        assert "MemberLeft" in kinds and "RebalanceStarted" in kinds
        assert any(r.startswith("Adding new member ") and "client reason:" in r for r in reasons)
        assert any(" explicit `LeaveGroup` request; client reason: " in r for r in reasons)
    else:
        assert "GroupEpochBumped" in kinds and "MemberLeft" in kinds
        assert any("joined the consumer group" in r for r in reasons)
        assert any(r.endswith(" left the consumer group") for r in reasons)
    assert browser.find_element("id", "group-actions").get_attribute("hidden") is not None   # read-only
    _shot(browser, "group-classic" if gid == CLASSIC else "group-kip848")
    # no script error, no resource refused (CSP) or missing, on any page so far
    assert not [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]


def test_console_is_off_by_default_and_writes_need_the_console():
    from kohort.broker.config import BrokerConfig
    assert BrokerConfig.from_properties()["console.listener"] == ""
    assert BrokerConfig.from_properties()["console.allow.writes"] is False
    from kohort.broker.config import BrokerConfigError
    with pytest.raises(BrokerConfigError, match="console.lag.sample.ms"):
        BrokerConfig.from_properties({"console.lag.sample.ms": "0"})
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "broker", "--console-allow-writes",
                        "--data-dir", tempfile.gettempdir() + "/kohort-console-unused"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--console-allow-writes needs --console HOST:PORT" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "broker", "--console", "nowhere"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--console must be HOST:PORT" in r.stderr
