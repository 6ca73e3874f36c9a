"""Share groups (KIP-932) on the broker: the share group, share partitions, share sessions and persisted share state, each a pure machine."""
