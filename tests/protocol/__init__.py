"""Tests of kohort.protocol: codecs, framing, record batches, compression, golden frames."""
