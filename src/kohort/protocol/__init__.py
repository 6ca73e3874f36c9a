"""kohort.protocol: the Kafka wire protocol, sans I/O (bytes in, objects out).

No sockets, asyncio, threads or clocks are imported anywhere under this package.
"""
