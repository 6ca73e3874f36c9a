"""What the console's JSON API answers, read directly from the broker's state (no requests, no copies):
storage (topics, partitions, log start / end offsets, high watermark, last stable offset, size) and
the group coordinator's registry (`rt.groups`: classic, KIP-848 consumer and KIP-932 share groups
(members, start offsets, lag and records in flight from the share partitions), each group's
committed offsets; the classic coordinator's memberless group holding a consumer group's offsets is
part of that consumer group, as ListGroups shows it).

Lag is computed as kohort's Admin.group_lag and kafka-consumer-groups.sh --describe do: per partition
that has a committed offset or an owner, lag = max(0, high watermark - committed offset), no lag
without a committed offset. Every function here is synchronous and runs on the broker's event loop
between two coordinator steps, so it sees one consistent state.
"""
from __future__ import annotations

import time

from kohort.errors import DecodeError
from kohort.protocol.consumer_offsets import OFFSETS_TOPIC
from kohort.protocol.consumer_protocol import decode_assignment, decode_subscription

TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _tp_list(assignment) -> list[dict]:
    """{topic: partitions} -> [{"topic", "partitions"}] sorted."""
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items()) if ps]


# -- broker and topics -------------------------------------------------------------------------------
def cluster(broker, console) -> dict:
    from kohort.version import __version__
    rt = getattr(broker, "coordinator", None)
    return {
        "version": __version__,
        "cluster_id": getattr(broker, "cluster_id", None),
        "node_id": broker.node_id,
        "listeners": [{"name": lst.name, "protocol": lst.protocol,
                       "host": (lst.advertised or (lst.host, lst.port))[0],
                       "port": (lst.advertised or (lst.host, lst.port))[1]}
                      for lst in broker.listeners],
        "started_ms": broker.started_ms,
        "now_ms": int(time.time() * 1000),
        "data_dir": broker.data_dir,
        "coordinator": None if rt is None else rt.groups.phase,
        "console": {"allow_writes": console.allow_writes, "lag_sample_ms": console.lag.interval_ms,
                    "lag_points": console.lag.points},
    }


def partition_offsets(broker, topic: str, partition: int) -> dict:
    lg = broker.storage.log(topic, partition)
    hw = lg.high_watermark
    lso = broker.producers.partition(topic, partition, lg).last_stable_offset(hw)
    return {"partition": partition, "log_start_offset": lg.log_start_offset, "log_end_offset": lg.log_end_offset,
            "high_watermark": hw, "last_stable_offset": lso, "size_bytes": lg.size_in_bytes,
            "leader": broker.node_id, "leader_epoch": broker.leader_epoch}


def topics(broker) -> list[dict]:
    out = []
    for t in sorted(broker.storage.topics(), key=lambda t: t.name):
        parts = [partition_offsets(broker, t.name, p) for p in range(t.num_partitions)]
        out.append({"name": t.name, "topic_id": str(t.topic_id), "internal": t.name in INTERNAL_TOPICS,
                    "partitions": parts,
                    "messages": sum(p["high_watermark"] - p["log_start_offset"] for p in parts),
                    "size_bytes": sum(p["size_bytes"] for p in parts)})
    return out


# -- groups ------------------------------------------------------------------------------------------
def group_ids(rt) -> list[str]:
    return sorted(rt.groups.group_ids())


def _classic_assignment(group, member) -> dict:
    """A classic member's assignment, decoded when the group speaks the consumer protocol."""
    if group.protocol_type != "consumer" or not member.assignment:
        return {}
    try:
        a = decode_assignment(member.assignment)
    except DecodeError:
        return {}
    out: dict[str, set] = {}
    for tp in a.assigned_partitions:
        out.setdefault(tp.topic, set()).update(tp.partitions)
    return out


def _classic_subscription(group, member) -> list[str]:
    if group.protocol_type != "consumer":
        return []
    meta = member.metadata(group.protocol_name) if group.protocol_name else (
        member.protocols[0][1] if member.protocols else b"")
    try:
        return sorted(decode_subscription(meta).topics) if meta else []
    except DecodeError:
        return []


def owners(rt, group_id: str) -> dict[tuple[str, int], dict]:
    """(topic, partition) -> the member holding it: {member_id, client_id, client_host}."""
    own = {}
    sg = rt.groups.share_group(group_id)
    if sg is not None:         # share members share partitions: the first one by member id is shown
        names = _share_names(rt)
        for m in sorted(sg.members.values(), key=lambda m: m.member_id):
            for t, ps in _share_assignment(names, m.assigned).items():
                for p in ps:
                    own.setdefault((t, p), {"member_id": m.member_id, "client_id": m.client_id,
                                            "client_host": m.client_host})
        return own
    cg = rt.groups.consumer_group(group_id)
    if cg is not None:
        for m in cg.members.values():
            for t, ps in m.assigned.items():
                for p in ps:
                    own[(t, p)] = {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host}
        return own
    g = rt.groups.classic_group(group_id)
    if g is None:
        return own
    for m in g.members.values():
        for t, ps in _classic_assignment(g, m).items():
            for p in ps:
                own[(t, p)] = {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host}
    return own


def group_offsets(broker, group_id: str) -> list[dict]:
    """Per partition with a committed offset or an owner: committed offset, log end, lag, owner."""
    rt = broker.coordinator
    own = owners(rt, group_id)
    if rt.groups.share_group(group_id) is not None:
        return _share_offsets(broker, group_id, own)
    committed = rt.groups.committed_offsets(group_id)
    storage = broker.storage
    rows = []
    for (t, p) in sorted(set(committed) | set(own)):
        c = committed.get((t, p))
        end = storage.log(t, p).high_watermark if storage.has_topic(t) and p < storage.topic(t).num_partitions else -1
        cur = c.offset if c is not None else None
        m = own.get((t, p))
        rows.append({"topic": t, "partition": p, "committed_offset": cur, "log_end_offset": end,
                     "lag": None if cur is None or end < 0 else max(0, end - cur),
                     "metadata": c.metadata if c is not None else None,
                     "commit_timestamp": c.commit_timestamp if c is not None else None,
                     "member_id": m["member_id"] if m else None, "client_id": m["client_id"] if m else None,
                     "client_host": m["client_host"] if m else None})
    return rows


def _share_names(rt) -> dict:
    return {t.topic_id: t.name for t in rt.broker.storage.topics()}


def _share_assignment(names: dict, assigned: dict) -> dict[str, list[int]]:
    """A share member's assignment (topic id -> partitions) by topic name."""
    return {names[t]: sorted(ps) for t, ps in assigned.items() if t in names and ps}


def _share_offsets(broker, group_id: str, own: dict) -> list[dict]:
    """A share group's partitions on this leader: start offset (SPSO), lag (KIP-1226), records
    in flight (acquired) and one owner."""
    leader = getattr(broker, "share_leader", None)
    if leader is None:
        return []
    names = {t.topic_id: t.name for t in broker.storage.topics()}
    rows = []
    for (gid, tid, p), sp in sorted(leader.partitions.items(), key=lambda kv: (names.get(kv[0][1], ""), kv[0][2])):
        if gid != group_id or tid not in names:
            continue
        t = names[tid]
        start, lag = leader.offset_and_lag(gid, tid, t, p)
        m = own.get((t, p))
        rows.append({"topic": t, "partition": p, "start_offset": start, "committed_offset": None,
                     "log_end_offset": broker.storage.log(t, p).high_watermark, "lag": lag,
                     "in_flight": sp.in_flight_count(), "member_id": m["member_id"] if m else None,
                     "client_id": m["client_id"] if m else None, "client_host": m["client_host"] if m else None})
    return rows


def _summary(rt, gid: str) -> dict:
    sg = rt.groups.share_group(gid)
    if sg is not None:
        return {"group_id": gid, "type": "share", "protocol_type": "share", "state": sg.state,
                "group_epoch": sg.group_epoch, "assignment_epoch": sg.assignment_epoch,
                "generation": sg.group_epoch, "members": len(sg.members), "assignor": "simple"}
    cg = rt.groups.consumer_group(gid)
    if cg is not None:
        return {"group_id": gid, "type": "consumer", "protocol_type": "consumer", "state": cg.state.value,
                "group_epoch": cg.group_epoch, "assignment_epoch": cg.assignment_epoch,
                "generation": cg.group_epoch, "members": len(cg.members),
                "assignor": rt.groups.assignor_name(gid) if cg.members else None}
    g = rt.groups.classic_group(gid)
    return {"group_id": gid, "type": "classic", "protocol_type": g.protocol_type or "", "state": g.state.value,
            "generation": g.generation_id, "members": len(g.members), "assignor": g.protocol_name,
            "leader": g.leader_id}


def groups(broker, console=None) -> list[dict]:
    rt = broker.coordinator
    if rt is None:
        return []
    out = []
    for gid in group_ids(rt):
        s = _summary(rt, gid)
        rows = group_offsets(broker, gid)
        lags = [r["lag"] for r in rows if r["lag"] is not None]
        s["total_lag"] = sum(lags) if lags else None
        s["partitions"] = len(rows)
        out.append(s)
    return out


def group(broker, group_id: str, console=None) -> dict | None:
    """Everything about one group; None when there is no such group (and no history of one)."""
    rt = broker.coordinator
    events = console.events.history(group_id) if console is not None else []
    lag = console.lag.series(group_id) if console is not None else []
    if rt is None or group_id not in group_ids(rt):
        if not events:
            return None
        return {"group_id": group_id, "type": None, "state": "Dead", "members": [], "offsets": [],
                "total_lag": None, "lag_history": lag, "events": [e.as_dict() for e in events]}
    d = _summary(rt, group_id)
    cg = rt.groups.consumer_group(group_id)
    members = []
    sg = rt.groups.share_group(group_id)
    if sg is not None:
        names = _share_names(rt)
        for m in sorted(sg.members.values(), key=lambda m: m.member_id):
            members.append({
                "member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "subscribed_topics": sorted(m.subscribed_topic_names), "protocol": "share",
                "assignment": _tp_list(_share_assignment(names, m.assigned)),
            })
    elif cg is not None:
        for m in sorted(cg.members.values(), key=lambda m: m.member_id):
            members.append({
                "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                "client_host": m.client_host, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "previous_member_epoch": m.previous_member_epoch, "member_state": m.state.name,
                "subscribed_topics": sorted(m.subscribed_topic_names), "subscribed_regex": m.subscribed_topic_regex,
                "server_assignor": m.server_assignor, "protocol": "classic" if m.classic is not None else "consumer",
                "assignment": _tp_list(m.assigned), "pending_revocation": _tp_list(m.pending_revocation),
                "target_assignment": _tp_list(cg.target.get(m.member_id, {})),
            })
    else:
        g = rt.groups.classic_group(group_id)
        for m in sorted(g.members.values(), key=lambda m: m.member_id):
            members.append({
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms, "leader": m.member_id == g.leader_id,
                "subscribed_topics": _classic_subscription(g, m),
                "protocols": [n for n, _ in m.protocols],
                "assignment": _tp_list(_classic_assignment(g, m)),
            })
    d["members"] = members
    d["offsets"] = group_offsets(broker, group_id)
    lags = [r["lag"] for r in d["offsets"] if r["lag"] is not None]
    d["total_lag"] = sum(lags) if lags else None
    d["lag_history"] = lag
    d["events"] = [e.as_dict() for e in events]
    return d


def group_state(broker, group_id: str) -> str | None:
    """The group's state as ListGroups reports it, None if there is no such group."""
    rt = broker.coordinator
    if rt is None or group_id not in group_ids(rt):
        return None
    return _summary(rt, group_id)["state"]
