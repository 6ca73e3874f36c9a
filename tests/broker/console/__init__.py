"""Tests of kohort.broker.console: the web console, its group events and write actions."""
