"""Tests of kohort.testing: the in-process broker, its fault seam and the pytest plugin."""
