"""The share consumer (KIP-932): its pure member machine, share sessions and acknowledgement batching."""
