"""Faults: the fault proxy and its workloads, broker SIGKILL loops, a full data directory."""
