"""kohort's version: one module with nothing else in it, so any module can import it without
importing the package's lazy exports (the clients)."""
__version__ = "0.1.0"
