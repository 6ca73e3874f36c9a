"""kohort's client: the I/O shell around kohort.protocol.

config (Kafka's dotted settings), network (sockets, one I/O thread), cluster (metadata), consumer
(group membership, fetching, offsets). The producer and admin client build on the same network layer.
"""
