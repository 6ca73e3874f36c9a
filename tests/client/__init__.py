"""Tests of kohort.client: network, configuration, metadata, statistics, the admin client."""
