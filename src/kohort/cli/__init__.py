"""The `kohort` command line."""
