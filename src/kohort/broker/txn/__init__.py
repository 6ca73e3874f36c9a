"""Transactions (KIP-98): the transaction coordinator as a pure state machine (`coordinator`), the
`__transaction_state` record formats (`log_format`) and its broker-side driver (`runtime`)."""
