"""`kohort share-groups` against kafka-share-groups.sh (Kafka 4.3.1's ShareGroupCommand) on the same share
groups of Apache Kafka 4.3.1 (one node, the fast share settings of test_share_consumer_kafka.py), made with
kohort.ShareConsumer: --describe --offsets/--members/--state with --verbose (same rows), --list --state, a
live group refusing --reset-offsets, --delete-offsets and --delete in both tools; on the Empty group each
tool reads what the other wrote (--reset-offsets --execute, --delete-offsets, --delete); and the checks
kohort makes before it connects (Kafka's spelling, the required --dry-run/--execute, bad values)."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from kohort.cli.main import main
from tests.helpers.kafka_cluster import SHARE_GROUPS, run_tool


def kohort(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def rows(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip()]


# -- no broker --------------------------------------------------------------------------------------------
def test_kafka_spelling_is_translated():
    from kohort.cli.groups import kafka_style
    from kohort.cli.share_groups import ACTIONS
    assert kafka_style(["--describe", "--group", "a", "--group=b", "--members", "--verbose", "--timeout", "5000"],
                       ACTIONS) == ["describe", "a", "b", "--members", "--verbose", "--timeout", "5"]
    assert kafka_style(["--reset-offsets", "--group", "g", "--topic", "t:0,1", "--to-latest", "--dry-run"],
                       ACTIONS) == ["reset-offsets", "g", "--topic", "t:0,1", "--to-latest", "--dry-run"]
    assert kafka_style(["--list", "--state"], ACTIONS) == ["list", "--state"]
    with pytest.raises(Exception, match="exactly one action"):
        kafka_style(["--list", "--delete"], ACTIONS)
    # --validate-regex is kafka-consumer-groups.sh's, not an action of this tool
    assert kafka_style(["--validate-regex", "x"], ACTIONS) == ["--validate-regex", "x"]


def test_refusals_before_connecting(capsys):
    """Nothing is asked of the (absent) cluster when the command line cannot be right."""
    nowhere = ("--bootstrap-server", "127.0.0.1:1", "--timeout", "1000")
    rc, _, err = kohort(capsys, "share-groups", "--reset-offsets", "--group", "g", "--all-topics",
                        "--to-latest", *nowhere)
    assert rc == 1 and "Option [reset-offsets] takes the option: [execute] or [dry-run]" in err
    rc, _, err = kohort(capsys, "share-groups", "--reset-offsets", "--group", "g", "--to-latest", "--execute",
                        *nowhere)
    assert rc == 1 and "[all-topics], [topic]" in err
    rc, _, err = kohort(capsys, "share-groups", "--reset-offsets", "--group", "a", "--group", "b", "--all-topics",
                        "--to-earliest", "--execute", *nowhere)
    assert rc == 1 and "exactly one GROUP" in err
    rc, _, err = kohort(capsys, "share-groups", "--reset-offsets", "--group", "g", "--all-topics",
                        "--to-datetime", "yesterday", "--dry-run", *nowhere)
    assert rc == 1 and "'yesterday' is not YYYY-MM-DDTHH:MM:SS" in err
    rc, _, err = kohort(capsys, "share-groups", "--list", "--state", "bogus", *nowhere)
    assert rc == 1 and "valid states are: Dead, Stable, Empty" in err
    with pytest.raises(SystemExit) as e:          # argparse: one reset target only
        main(["share-groups", "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest",
              "--execute", *nowhere])
    assert e.value.code == 2
    capsys.readouterr()


# -- Apache Kafka 4.3.1 ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kshare():
    from tests.helpers.kafka_cluster import KafkaCluster
    from tests.client.share.test_share_consumer_kafka import SHARE_BROKER_CONFIG
    kc = KafkaCluster(nodes=1, extra_config=SHARE_BROKER_CONFIG)
    kc.start()
    yield kc
    kc.close()


def kafka(bs, *args) -> tuple[int, str, str]:
    r = run_tool(SHARE_GROUPS, "--bootstrap-server", bs, *args, check=False)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def live(kshare):
    """A share group of two kohort ShareConsumers on a 3-partition topic of 30 records, every record
    accepted and every share-partition's state written (lag 0), the assignment settled."""
    from kohort import Admin, Producer, ShareConsumer
    bs = kshare.bootstrap
    t = "shc-" + uuid.uuid4().hex[:6]
    g = "g-" + t
    admin = Admin({"bootstrap.servers": bs})
    admin.create_topics([t], num_partitions=3, replication_factor=1)
    admin.alter_configs(("group", g), {"share.auto.offset.reset": "earliest"})
    with Producer({"bootstrap.servers": bs}) as p:
        for i in range(30):
            p.send(t, value=b"v%d" % i, partition=i % 3)
        p.flush()
    members = [ShareConsumer({"bootstrap.servers": bs, "group.id": g, "client.id": f"shc-{i}"}) for i in range(2)]
    for c in members:
        c.subscribe([t])
    got = 0
    deadline = time.monotonic() + 30
    settled = False
    while time.monotonic() < deadline and not settled:
        for c in members:
            got += len(c.poll(0.3))
        for c in members:
            c.commit_sync(10)
        infos = admin.list_share_group_offsets(g, uninitialized=True)
        d = admin.describe_share_groups([g])[g]
        settled = (got == 30 and len(infos) == 3 and all(i is not None and i.lag == 0 for i in infos.values())
                   and d.state == "Stable" and len(d.members) == 2 and all(m.assignment for m in d.members)
                   and d.group_epoch == d.assignment_epoch)
    assert settled, f"group did not settle: {got} records, {infos}, {d}"
    yield {"bs": bs, "topic": t, "group": g, "members": members, "admin": admin}
    for c in members:
        c.close()
    admin.close()


def test_live_group_described_alike(capsys, live):
    """--describe (offsets), --members and --state, each with --verbose: the same rows from both tools;
    --list --state lists the group Stable in both."""
    bs, g, t = live["bs"], live["group"], live["topic"]
    for extra in (["--verbose"], ["--members", "--verbose"], ["--state", "--verbose"]):
        krc, kout, _ = kafka(bs, "--describe", "--group", g, *extra)
        rc, out, err = kohort(capsys, "share-groups", "--describe", "--group", g, *extra, "--bootstrap-server", bs)
        assert krc == 0 and rc == 0, err
        theirs, ours = rows(kout), rows(out)
        assert ours[0] == theirs[0], extra                         # the same columns
        assert sorted(ours[1:]) == sorted(theirs[1:]), extra       # the same values
        assert len(ours) == {"--verbose": 4, "--members": 3, "--state": 2}[extra[0]], out
    assert rows(out)[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    # the cluster has this one share group: --all-groups describes it alone
    assert rows(kohort(capsys, "share-groups", "--describe", "--all-groups", "--state", "--verbose", "-b", bs)[1]) \
        == rows(out)
    rc, out, _ = kohort(capsys, "share-groups", "describe", g, "--members", "--json", "-b", bs)
    (view,) = json.loads(out)
    assert rc == 0 and view["state"] == "Stable" and view["assignor"] == "simple"
    assert sorted(m["client_id"] for m in view["members"]) == ["shc-0", "shc-1"]
    assert sorted(tuple(p) for m in view["members"] for p in m["assignment"]) == [(t, 0), (t, 1), (t, 2)]
    assert [r[2:] for r in sorted(rows(kohort(capsys, "share-groups", "describe", g, "-b", bs)[1])[1:])] == \
        [[str(p), "0", "0"] for p in range(3)]                    # start offset 0, lag 0 (the records were kept)
    _, kout, _ = kafka(bs, "--list", "--state")
    rc, out, _ = kohort(capsys, "share-groups", "--list", "--state", "--bootstrap-server", bs)
    assert rows(out)[0] == rows(kout)[0] == ["GROUP", "STATE"]
    assert [g, "Stable"] in rows(out) and [g, "Stable"] in rows(kout)
    rc, out, _ = kohort(capsys, "share-groups", "--list", "--bootstrap-server", bs)
    assert g in out.split()


@pytest.mark.slow
def test_live_group_refuses_reset_and_deletes(capsys, live):
    """A group with members: --reset-offsets --execute, --delete-offsets and --delete refused by both tools
    with Kafka's messages; nothing changes."""
    bs, g, t = live["bs"], live["group"], live["topic"]
    krc, _, kerr = kafka(bs, "--reset-offsets", "--group", g, "--topic", t, "--to-latest", "--execute")
    rc, out, err = kohort(capsys, "share-groups", "--reset-offsets", "--group", g, "--topic", t, "--to-latest",
                          "--execute", "--bootstrap-server", bs)
    assert krc == 1 and rc == 1 and out == ""
    assert f"Share group '{g}' is not empty." in kerr and f"Share group '{g}' is not empty." in err
    _, kout, _ = kafka(bs, "--delete", "--group", g)
    rc, out, err = kohort(capsys, "share-groups", "--delete", "--group", g, "--bootstrap-server", bs)
    assert rc == 1
    for text in ("Error: Deletion of some share groups failed:",
                 f"* Group '{g}' could not be deleted due to: ", f"Share group '{g}' is not EMPTY."):
        assert text in kout and text in err, text
    _, kout, _ = kafka(bs, "--delete-offsets", "--group", g, "--topic", t)
    rc, out, err = kohort(capsys, "share-groups", "--delete-offsets", "--group", g, "--topic", t,
                          "--bootstrap-server", bs)
    assert rc == 1
    assert "Error: The group is not empty." in kout and "The group is not empty." in err
    assert rows(out)[0] == rows(kout)[1] == ["TOPIC", "STATUS"]         # Kafka's first line is its Error:
    assert rows(out)[1][:2] == rows(kout)[2][:2] == [t, "Error:"] and len(rows(out)) == len(rows(kout)) - 1
    infos = live["admin"].list_share_group_offsets(g)
    assert {tp.partition: i.start_offset for tp, i in infos.items()} == {0: 0, 1: 0, 2: 0}


def test_empty_group_each_tool_reads_the_others_writes(capsys, live):
    """Members gone (Empty): the same --reset-offsets dry-run plan from both tools; kohort's --execute as
    Kafka's --describe reads it; kohort's --delete-offsets as Kafka's tool sees it; kohort's --delete with
    an unknown group beside (Kafka's pre-check messages), after which Kafka no longer lists the group."""
    bs, g, t, admin = live["bs"], live["group"], live["topic"], live["admin"]
    for c in live["members"]:
        c.close()
    deadline = time.monotonic() + 15
    while admin.describe_share_groups([g])[g].state != "Empty" and time.monotonic() < deadline:
        time.sleep(0.2)
    rc, out, err = kohort(capsys, "share-groups", "--describe", "--group", g, "--members", "-b", bs)
    assert rc == 0 and out == "" and f"Share group '{g}' has no active members." in err

    _, kout, _ = kafka(bs, "--reset-offsets", "--group", g, "--topic", f"{t}:0,2", "--to-earliest", "--dry-run")
    rc, out, _ = kohort(capsys, "share-groups", "--reset-offsets", "--group", g, "--topic", f"{t}:0,2",
                        "--to-earliest", "--dry-run", "--bootstrap-server", bs)
    assert rc == 0 and rows(out)[0] == rows(kout)[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert sorted(rows(out)[1:]) == sorted(rows(kout)[1:]) == [[g, t, "0", "0"], [g, t, "2", "0"]]

    rc, out, _ = kohort(capsys, "share-groups", "--reset-offsets", "--group", g, "--all-topics", "--to-offset", "4",
                        "--execute", "--bootstrap-server", bs)
    assert rc == 0 and sorted(rows(out)[1:]) == [[g, t, str(p), "4"] for p in range(3)]
    _, kout, _ = kafka(bs, "--describe", "--group", g)
    assert sorted(rows(kout)[1:]) == [[g, t, str(p), "4", "6"] for p in range(3)]     # 10 records each, from 4

    missing = "no-such-topic-" + uuid.uuid4().hex[:6]
    rc, out, err = kohort(capsys, "share-groups", "--delete-offsets", "--group", g, "--topic", t, "--topic", missing,
                          "--bootstrap-server", bs)
    assert rc == 1
    status = {r[0]: " ".join(r[1:]) for r in rows(out)[1:]}
    assert status[t] == "Successful" and "This server does not host this topic-partition." in status[missing]
    _, kout, _ = kafka(bs, "--describe", "--group", g)
    assert f"Share group '{g}' has no offset information." in kout
    rc, out, _ = kohort(capsys, "share-groups", "--describe", "--group", g, "-b", bs)
    assert out.strip() == f"Share group '{g}' has no offset information."

    stranger = "not-a-share-group-" + uuid.uuid4().hex[:6]
    rc, out, err = kohort(capsys, "share-groups", "--delete", "--group", g, "--group", stranger,
                          "--bootstrap-server", bs)
    assert rc == 1
    assert f"* Group '{stranger}' could not be deleted due to: Group '{stranger}' is not a share group." in err
    assert f"These share groups were deleted successfully: '{g}'" in out
    _, kout, _ = kafka(bs, "--list")
    assert g not in kout.split()
