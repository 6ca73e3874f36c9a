"""Group events for the broker's log and metrics, read off the coordinators' state (no coordinator change).

`GroupObserver` keeps a small snapshot per group; the coordinator runtime calls `observe(group_ids,
cause)` after applying an operation, a timer or a completed append, and the observer compares the
group's state with its snapshot and turns the difference into events:

classic groups (Kafka's GroupCoordinator log lines and rebalance reasons):
  * `member-joined` / `member-left` ("[Group G] Member X has left group through explicit `LeaveGroup`
    request; client reason: C") / `member-expired` ("Member X in group G has failed, removing it from
    the group."),
  * `rebalance` "Preparing to rebalance group G in state S with old generation N (reason: R)." with
    Kafka's reasons: "Adding new member X with group instance id I; client reason: C", "Updating
    metadata for member X during S; client reason: C", "Leader X re-joining group during S; client
    reason: C", "explicit `LeaveGroup` request for (X) members.", "removing member X on heartbeat
    expiration." (client reason "not provided" when the client sent none),
  * `stabilized` "Stabilized group G generation N with M members.", `empty` "Group G with generation N
    is now empty.";
KIP-848 consumer groups (Kafka's GroupMetadataManager lines): `member-joined` "[GroupId G] Member X joins
  the consumer group using the consumer protocol.", `member-left`, `member-fenced` "[GroupId G] Member X
  fenced from the group because the member session expired." (or a rebalance, join or sync timeout),
  `epoch-bump` "[GroupId G] Bumped group epoch to N.",
  `member-epoch` (DEBUG) "[GroupId G] Member X new assignment state: epoch=E, previousEpoch=P, ...".

Each event is one log record on `kohort.broker.groups` with the fields under `extra={"event": ...}`
(the JSON-lines log format prints them as they are), kept in `history` (the last 1000 INFO events, as
dicts with `ts` and `msg`: a rebalance history for whoever wants to show one), and counted in
`rebalances` per group (classic: each PreparingRebalance; consumer groups: each group-epoch bump) for the
Prometheus metrics.
"""
from __future__ import annotations

import collections
import logging
import time

log = logging.getLogger("kohort.broker.groups")


def _reason(r) -> str:
    return r if r else "not provided"


def classic_snapshot(g) -> dict:
    return {"type": "classic", "state": g.state.value, "generation": g.generation_id, "leader": g.leader_id,
            "members": {m.member_id: (m.group_instance_id, m.client_id, m.client_host) for m in g.members.values()}}


def consumer_snapshot(g) -> dict:
    return {"type": "consumer", "state": g.state.value, "epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
            "members": {m.member_id: (m.instance_id, m.client_id, m.client_host, m.member_epoch,
                                      m.previous_member_epoch, m.state.name,
                                      sum(len(ps) for ps in m.assigned.values()),
                                      sum(len(ps) for ps in m.pending_revocation.values()),
                                      m.classic is not None)
                        for m in g.members.values()}}


class GroupObserver:
    """Snapshots of the groups the runtime touched, and the events between two snapshots."""

    HISTORY = 1000

    def __init__(self, clock=time.time) -> None:
        self.snapshots: dict[tuple[str, str], dict] = {}
        self.rebalances: dict[str, int] = {}
        self.history: collections.deque = collections.deque(maxlen=self.HISTORY)   # recent events, oldest first
        self._clock = clock

    def prime(self, classic: dict, consumer: dict | None) -> None:
        """Take the groups as they are (after loading `__consumer_offsets`) without events."""
        for gid, g in classic.items():
            self.snapshots[("classic", gid)] = classic_snapshot(g)
        for gid, g in (consumer or {}).items():
            self.snapshots[("consumer", gid)] = consumer_snapshot(g)

    def observe(self, classic: dict, consumer: dict, group_ids, cause: dict) -> None:
        """classic/consumer: the coordinators' group tables; cause: {"op": ..., "member_id": ...,
        "reason": ..., "timer": ...} of what just ran."""
        for gid in group_ids:
            if gid is None:
                continue
            for kind, table, snap in (("classic", classic, classic_snapshot), ("consumer", consumer, consumer_snapshot)):
                g = table.get(gid) if table is not None else None
                before = self.snapshots.get((kind, gid))
                after = snap(g) if g is not None else None
                if before == after:
                    continue
                if after is None:
                    self.snapshots.pop((kind, gid), None)
                    if before is not None and before["members"]:
                        self._emit(logging.INFO, "group-removed", f"Group {gid} was removed.", gid)
                    continue
                self.snapshots[(kind, gid)] = after
                try:
                    if kind == "classic":
                        self._classic(gid, before, after, cause)
                    else:
                        self._consumer(gid, before, after, cause)
                except Exception:      # noqa: BLE001 - observing must never break the coordinator
                    log.exception("group event for %s failed", gid)

    def _emit(self, level: int, event: str, msg: str, group: str, **fields) -> None:
        if event in ("rebalance", "epoch-bump"):
            self.rebalances[group] = self.rebalances.get(group, 0) + 1
        ev = {"event": event, "group": group, **fields}
        if level >= logging.INFO:
            self.history.append({"ts": self._clock(), "msg": msg, **ev})
        if log.isEnabledFor(level):
            log.log(level, msg, extra={"event": ev})

    # -- classic ------------------------------------------------------------------------------------
    def _classic(self, gid: str, before: dict | None, after: dict, cause: dict) -> None:
        b_members = before["members"] if before else {}
        b_state = before["state"] if before else "Empty"
        b_gen = before["generation"] if before else 0
        a_members = after["members"]
        joined = [m for m in a_members if m not in b_members]
        left = [m for m in b_members if m not in a_members]
        op = cause.get("op")
        for m in joined:
            inst, cid, host = a_members[m]
            self._emit(logging.INFO, "member-joined",
                       f"Member {m} (client id {cid}, host {host}, group instance id {inst}) joined group {gid}.",
                       gid, member_id=m, client_id=cid, host=host, group_instance_id=inst, protocol="classic")
        for m in left:
            inst, cid, host = b_members[m]
            if op == "timer":
                self._emit(logging.INFO, "member-expired",
                           f"Member {m} in group {gid} has failed, removing it from the group.", gid,
                           member_id=m, client_id=cid, group_instance_id=inst, protocol="classic")
            else:
                self._emit(logging.INFO, "member-left",
                           f"[Group {gid}] Member {m} has left group through explicit `LeaveGroup` request; "
                           f"client reason: {_reason(cause.get('reason'))}" if op == "leave_group" else
                           f"[Group {gid}] Member {m} has left group ({op}).", gid,
                           member_id=m, client_id=cid, group_instance_id=inst, protocol="classic",
                           reason=_reason(cause.get("reason")))
        prep = "PreparingRebalance"
        entered = after["state"] == prep and b_state != prep
        # a rebalance that went through PreparingRebalance within one operation (the last member left)
        passed = after["generation"] > b_gen and prep not in (b_state, after["state"])
        if entered or passed:
            old_gen = b_gen if passed else after["generation"]
            reason = self._classic_reason(cause, joined, left, a_members, before, b_state)
            self._emit(logging.INFO, "rebalance",
                       f"Preparing to rebalance group {gid} in state {prep} with old generation "
                       f"{old_gen} (reason: {reason}).", gid, generation=old_gen,
                       reason=reason, previous_state=b_state)
        if after["state"] in ("CompletingRebalance", "Stable") and b_state == "PreparingRebalance":
            self._emit(logging.INFO, "stabilized",
                       f"Stabilized group {gid} generation {after['generation']} with {len(a_members)} members.",
                       gid, generation=after["generation"], members=len(a_members), leader=after["leader"])
        if after["state"] == "Stable" and b_state == "CompletingRebalance":
            static = sum(1 for inst, _, _ in a_members.values() if inst)
            self._emit(logging.INFO, "assignment",
                       f"Assignment received from leader {after['leader']} for group {gid} for generation "
                       f"{after['generation']}. The group has {len(a_members)} members, {static} of which are static.",
                       gid, generation=after["generation"], members=len(a_members), leader=after["leader"])
        if after["state"] == "Empty" and b_state != "Empty" and before is not None:
            self._emit(logging.INFO, "empty", f"Group {gid} with generation {after['generation']} is now empty.",
                       gid, generation=after["generation"])

    @staticmethod
    def _classic_reason(cause, joined, left, a_members, before, b_state) -> str:
        op, client = cause.get("op"), _reason(cause.get("reason"))
        if joined:
            m = joined[0]
            inst = a_members[m][0]
            return f"Adding new member {m} with group instance id {inst or 'null'}; client reason: {client}"
        if left:
            if op == "timer":
                return f"removing member {left[0]} on heartbeat expiration."
            if op == "leave_group":
                return f"explicit `LeaveGroup` request for ({', '.join(left)}) members."
            return f"removing member {left[0]} ({op})."
        m = cause.get("member_id")
        if op == "join_group" and m:
            if before is not None and before.get("leader") == m:
                return f"Leader {m} re-joining group during {b_state}; client reason: {client}"
            return f"Updating metadata for member {m} during {b_state}; client reason: {client}"
        return str(op or "coordinator")

    # -- KIP-848 consumer groups ----------------------------------------------------------------------
    def _consumer(self, gid: str, before: dict | None, after: dict, cause: dict) -> None:
        b_members = before["members"] if before else {}
        a_members = after["members"]
        for m in a_members:
            if m not in b_members:
                inst, cid, host = a_members[m][:3]
                self._emit(logging.INFO, "member-joined",
                           f"[GroupId {gid}] Member {m} joins the consumer group using the "
                           f"{'classic' if a_members[m][8] else 'consumer'} protocol.", gid, member_id=m,
                           client_id=cid, host=host, group_instance_id=inst,
                           protocol="classic" if a_members[m][8] else "consumer")
        for m in b_members:
            if m not in a_members:
                inst, cid = b_members[m][:2]
                timer = cause.get("timer")
                if timer:
                    why = {"cg-session": "the member session expired",
                           "cg-rebalance": f"it failed to transition from epoch {b_members[m][3]} within its "
                                           f"rebalance timeout",
                           "cg-join": "the classic member failed to join within the rebalance timeout",
                           "cg-sync": "the member failed to sync within timeout"}.get(timer, timer)
                    self._emit(logging.INFO, "member-fenced",
                               f"[GroupId {gid}] Member {m} fenced from the group because {why}.", gid,
                               member_id=m, client_id=cid, group_instance_id=inst, reason=why, protocol="consumer")
                else:
                    self._emit(logging.INFO, "member-left", f"[GroupId {gid}] Member {m} left the consumer group.",
                               gid, member_id=m, client_id=cid, group_instance_id=inst, protocol="consumer")
        b_epoch = before["epoch"] if before else 0
        if after["epoch"] != b_epoch:
            self._emit(logging.INFO, "epoch-bump", f"[GroupId {gid}] Bumped group epoch to {after['epoch']}.", gid,
                       group_epoch=after["epoch"], previous_group_epoch=b_epoch, members=len(a_members))
        if after["assignment_epoch"] != (before["assignment_epoch"] if before else 0):
            self._emit(logging.INFO, "target-assignment",
                       f"[GroupId {gid}] Computed a new target assignment for epoch {after['assignment_epoch']}.",
                       gid, assignment_epoch=after["assignment_epoch"])
        for m, st in a_members.items():
            old = b_members.get(m)
            if old is None or old[3:8] != st[3:8]:
                epoch, prev, state, assigned, revoking = st[3:8]
                self._emit(logging.DEBUG, "member-epoch",
                           f"[GroupId {gid}] Member {m} new assignment state: epoch={epoch}, previousEpoch={prev}, "
                           f"state={state}, assignedPartitions={assigned} and revokedPartitions={revoking}.",
                           gid, member_id=m, member_epoch=epoch, previous_member_epoch=prev, member_state=state,
                           assigned_partitions=assigned, revoking_partitions=revoking)
        if before is not None and after["state"] != before["state"]:
            self._emit(logging.DEBUG, "state", f"[GroupId {gid}] Transitioned from {before['state']} to "
                                               f"{after['state']}.", gid, state=after["state"],
                       previous_state=before["state"])
