"""kohort's group coordinator: the group machines, pure (time passed in, no I/O), and the registry
that knows which machine owns a group.

Modules: `machine` (GroupType, AppendToken, GroupMachine: the timer and pending-append plumbing every
machine shares), `coordinator` (ClassicGroupCoordinator: classic groups, JoinGroup to DeleteGroups,
and the offset operations of every group), `offsets` (OffsetMetadataManager: committed offsets by
group id; the rules asking the group of an id, of any type, whether it may commit or fetch),
`group` (one classic group, Kafka's ClassicGroupState), `consumer_group`
(ConsumerGroups: KIP-848 consumer-protocol groups), `consumer_group_model` (their groups, members,
records and snapshots), `classic_members` (classic members inside consumer groups, online upgrade and
downgrade), `registry` (GroupRegistry: every group id, its GroupType and owning machine), `serde`
(each machine's records <-> `__consumer_offsets` key/value bytes), `txn_offsets` (transactional
offsets pending until their marker), `model` (params, results, records, Outcome), `config`
(CoordinatorConfig by Kafka's property names), `codes` (Kafka error codes, append-error mapping).

The broker's runtime (kohort.broker.coordinator_runtime) drives every machine alike: call an
operation, send `outcome.responses`, append `outcome.appends` and report each token back with
`on_append_done`, keep `outcome.timers` and call `fire_timer` on the machine of the timer's namespace.
"""
from .codes import map_append_error
from .config import CoordinatorConfig
from .coordinator import (
    EXPIRATION_KEY, ClassicGroupCoordinator, heartbeat_key, initial_delay_key, join_key, sync_key,
)
from .group import ClassicGroup, GroupState, Member
from .machine import AppendToken, GroupMachine, GroupType
from .registry import GroupRegistry
from . import model as _model
from .model import *  # noqa: F401,F403

__all__ = [
    "CoordinatorConfig", "ClassicGroupCoordinator", "GroupState", "ClassicGroup", "Member",
    "AppendToken", "GroupMachine", "GroupType", "GroupRegistry",
    "map_append_error", "EXPIRATION_KEY", "heartbeat_key", "initial_delay_key", "join_key", "sync_key",
] + [n for n, v in vars(_model).items() if isinstance(v, type) and v.__module__.endswith(".model")]
