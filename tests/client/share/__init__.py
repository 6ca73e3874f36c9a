"""Tests of kohort.client.share: the share member, acknowledgements and ShareConsumer."""
