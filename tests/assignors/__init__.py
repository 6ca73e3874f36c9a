"""Tests of kohort.assignors: the client-side and server-side (KIP-848) assignors."""
