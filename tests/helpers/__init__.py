"""What the tests share: broker fixtures, peers, raw clients, harnesses and the programs they run as
subprocesses. No tests here."""
