"""Tests of kohort.broker.txn: the transaction coordinator and transactions over the wire."""
