"""Tests of bench/: the harness and README's performance section."""
