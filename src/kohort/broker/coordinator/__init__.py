"""kohort's classic group coordinator: a pure state machine (time passed in, no I/O).

Modules: `coordinator` (GroupCoordinator: every operation, timers, pending appends, replay),
`group` (one group's state, Kafka's ClassicGroupState), `model` (params, results, records, Outcome),
`config` (CoordinatorConfig by Kafka's property names), `codes` (Kafka error codes, append-error
mapping). The broker runtime drives it: call an operation, send `outcome.responses`, append
`outcome.appends` and report back with `on_append_done`, keep `outcome.timers` and call `fire_timer`.
"""
from .codes import map_append_error
from .config import CoordinatorConfig
from .coordinator import (
    EXPIRATION_KEY, GroupCoordinator, heartbeat_key, initial_delay_key, join_key, sync_key,
)
from .group import ClassicGroup, GroupState, Member
from . import model as _model
from .model import *  # noqa: F401,F403

__all__ = [
    "CoordinatorConfig", "GroupCoordinator", "GroupState", "ClassicGroup", "Member",
    "map_append_error", "EXPIRATION_KEY", "heartbeat_key", "initial_delay_key", "join_key", "sync_key",
] + [n for n, v in vars(_model).items() if isinstance(v, type) and v.__module__.endswith(".model")]
