"""The console's write actions, on only with `--console-allow-writes`: reset a group's offsets (only
while it has no members, as kafka-consumer-groups.sh) and delete a group, checked with kohort's admin
client against a real kohort broker; the same refusals as the CLI (a live group), and no cross-origin
or non-JSON write. The button in the page is clicked in Chromium too."""
from __future__ import annotations

import pytest

from tests.helpers.brokers import KohortBroker, free_port
from tests.helpers.peers import create_topic, produce
from tests.broker.console.test_console import browser, get, post, wait_for  # noqa: F401 - the module's browser fixture

TOPIC = "w"


@pytest.fixture(scope="module")
def wenv():
    cport = free_port()
    with KohortBroker(config={"console.lag.sample.ms": 250},
                      extra_args=["--console", f"127.0.0.1:{cport}", "--console-allow-writes"]) as b:
        assert any("(read-write)" in line for line in b.log_lines), b.log_lines
        assert create_topic(b.bootstrap, TOPIC, 2) == 2
        produce(b.bootstrap, TOPIC, 40, partitions=2)
        yield b, f"http://127.0.0.1:{cport}"


def _admin(b):
    from kohort.client.admin import Admin
    return Admin({"bootstrap.servers": b.bootstrap})


def _commit(b, group: str, offsets: dict) -> None:
    from kohort.structs import TopicPartition
    a = _admin(b)
    try:
        a.alter_group_offsets(group, {TopicPartition(TOPIC, p): o for p, o in offsets.items()})
    finally:
        a.close()


def _committed(b, group: str) -> dict:
    a = _admin(b)
    try:
        return {tp.partition: om.offset for tp, om in a.list_group_offsets(group).items()}
    finally:
        a.close()


def test_reset_offsets_of_an_empty_group(wenv):
    b, url = wenv
    _commit(b, "idle", {0: 5, 1: 7})
    status, body = post(url + "/api/group/reset-offsets?id=idle", {"to": "earliest"})
    assert status == 200, body
    assert sorted((p["partition"], p["old_offset"], p["new_offset"]) for p in body["partitions"]) == [
        (0, 5, 0), (1, 7, 0)]
    assert _committed(b, "idle") == {0: 0, 1: 0}
    assert post(url + "/api/group/reset-offsets?id=idle", {"to": "latest"})[0] == 200
    assert _committed(b, "idle") == {0: 20, 1: 20}
    status, body = post(url + "/api/group/reset-offsets?id=idle", {"to": "offset", "offset": 999, "topic": TOPIC})
    assert status == 200 and _committed(b, "idle") == {0: 20, 1: 20}       # clamped into [start, end]
    assert post(url + "/api/group/reset-offsets?id=idle", {"to": "offset", "offset": 3})[0] == 200
    assert _committed(b, "idle") == {0: 3, 1: 3}
    for bad in ({"to": "sideways"}, {"to": "offset"}, {"to": "offset", "offset": "1"}):
        status, body = post(url + "/api/group/reset-offsets?id=idle", bad)
        assert status == 400, (bad, body)
    assert _committed(b, "idle") == {0: 3, 1: 3}
    assert post(url + "/api/group/reset-offsets?id=nobody", {"to": "earliest"})[0] == 404


def test_live_group_is_refused_and_writes_must_be_same_origin_json(wenv):
    import json
    import urllib.error
    import urllib.request
    from kohort import Consumer
    b, url = wenv
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "live", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        wait_for(lambda: c.poll(0.2) is not None and len(c.assignment()) == 2, 30, "assignment")
        c.commit()
        before = _committed(b, "live")
        status, body = post(url + "/api/group/reset-offsets?id=live", {"to": "earliest"})
        assert status == 409 and "is Stable" in body["error"] and "no members" in body["error"]
        status, body = post(url + "/api/group/delete?id=live", {})
        assert status == 409 and "NON_EMPTY_GROUP" in body["error"]
        assert _committed(b, "live") == before
    finally:
        c.close()
    status, body = post(url + "/api/group/delete?id=live", {}, headers={"Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]
    req = urllib.request.Request(url + "/api/group/delete?id=live", data=b"{}", method="POST",
                                 headers={"Content-Type": "text/plain"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403 and "application/json" in json.loads(e.value.read())["error"]
    assert _committed(b, "live") == before


def test_delete_group_and_the_reset_button_in_chromium(wenv, browser):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait
    b, url = wenv
    _commit(b, "to-reset", {0: 9, 1: 9})
    browser.get(url + "/?refresh=0#group=to-reset")
    WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "group-id").text == "to-reset")
    actions = browser.find_element("id", "group-actions")
    assert actions.is_displayed()
    browser.find_element("id", "reset-earliest").click()
    WebDriverWait(browser, 10).until(lambda d: d.switch_to.alert).accept()
    WebDriverWait(browser, 20).until(lambda d: d.find_element("id", "action-result").text == "done")
    assert _committed(b, "to-reset") == {0: 0, 1: 0}

    _commit(b, "doomed", {0: 1})
    assert get(url + "/api/group?id=doomed")[0] == 200
    status, body = post(url + "/api/group/delete?id=doomed", {})
    assert status == 200 and body == {"group_id": "doomed", "deleted": True}
    assert _committed(b, "doomed") == {}
    a = _admin(b)
    try:
        assert "doomed" not in {g.group_id for g in a.list_groups()}
    finally:
        a.close()
    status, hist = get(url + "/api/group?id=doomed")     # gone, but its history stays readable
    assert status == 200 and hist["state"] == "Dead"
    assert [e["kind"] for e in hist["events"]] == ["GroupCreated", "GroupDeleted"]
    assert post(url + "/api/group/delete?id=doomed", {})[0] == 404
