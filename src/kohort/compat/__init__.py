"""Compatibility layers: other clients' APIs over kohort's own client.

`kohort.compat.confluent_kafka` offers confluent-kafka-python's Producer/Consumer/AdminClient API, so a
confluent-kafka program runs on kohort by changing its import line.
"""
