"""confluent-kafka's ShareConsumer (librdkafka, KIP-932) as a share-group member in a process of its own:
the command line and the JSON-line events of tests/interop/peers/java/SharePeer.java (see there), so that a test
drives Java and librdkafka members alike (tests/helpers/peers.py `CkSharePeer`). Explicit mode acknowledges every
record of a poll and then calls commit_sync; "stop" on stdin closes the consumer (releasing what it holds).

    python tests/interop/peers/ck_share_member.py --bootstrap B --topic T --group G [--client-id ID]
        [--ack-mode explicit|implicit] [--release SPEC] [--release-until N] [--reject SPEC] [--hold SPEC]
        [--sleep-ms MS] [--fetch-min-bytes N] [--fetch-max-wait-ms MS]
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Callable

import confluent_kafka as ck


def spec(text: str | None) -> Callable[[ck.Message], bool]:
    """"*" (every record) or PARTITION:OFFSET[,PARTITION:OFFSET...]; None selects nothing."""
    if text is None:
        return lambda m: False
    if text == "*":
        return lambda m: True
    keys = set()
    for part in text.split(","):
        p, _, o = part.partition(":")
        if not o:
            raise SystemExit(f"bad record spec {part!r} (PARTITION:OFFSET)")
        keys.add((int(p), int(o)))
    return lambda m: (m.partition(), m.offset()) in keys


_out = threading.Lock()


def emit(event: str, **body) -> None:
    with _out:
        print(json.dumps({"event": event, **body}), flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="ck_share_member")
    for name in ("bootstrap", "topic", "group"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--client-id", default="ck-share-peer")
    ap.add_argument("--ack-mode", choices=("explicit", "implicit"), default="explicit")
    ap.add_argument("--release", default=None)
    ap.add_argument("--release-until", type=int, default=1)
    ap.add_argument("--reject", default=None)
    ap.add_argument("--hold", default=None)
    ap.add_argument("--sleep-ms", type=int, default=0)
    ap.add_argument("--fetch-min-bytes", type=int, default=None)
    ap.add_argument("--fetch-max-wait-ms", type=int, default=None)
    a = ap.parse_args(argv)
    release, reject, hold = spec(a.release), spec(a.reject), spec(a.hold)

    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()
    threading.Thread(target=watch_stdin, daemon=True).start()

    conf = {"bootstrap.servers": a.bootstrap, "group.id": a.group, "client.id": a.client_id,
            "share.acknowledgement.mode": a.ack_mode}
    if a.fetch_min_bytes is not None:
        conf["fetch.min.bytes"] = a.fetch_min_bytes
    if a.fetch_max_wait_ms is not None:
        conf["fetch.wait.max.ms"] = a.fetch_max_wait_ms
    c = ck.ShareConsumer(conf)
    total, slept, holding = 0, False, False
    try:
        c.subscribe(a.topic.split(","))
        emit("started", client_id=a.client_id)
        while not stop.is_set():
            if holding:
                time.sleep(0.1)
                continue
            msgs = list(c.poll(0.2))
            for m in msgs:
                if m.error() is not None:
                    emit("error", error=str(m.error()))
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            total += len(msgs)
            if a.sleep_ms and not slept:
                slept = True
                time.sleep(a.sleep_ms / 1000)
            held = 0
            for m in msgs:
                if a.ack_mode == "implicit":
                    ack = "IMPLICIT"
                elif hold(m):
                    ack, held = "HOLD", held + 1
                elif reject(m):
                    ack = "REJECT"
                    c.acknowledge(m, ck.AcknowledgeType.REJECT)
                elif release(m) and m.delivery_count() <= a.release_until:
                    ack = "RELEASE"
                    c.acknowledge(m, ck.AcknowledgeType.RELEASE)
                else:
                    ack = "ACCEPT"
                    c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
                value = m.value()
                emit("record", topic=m.topic(), partition=m.partition(), offset=m.offset(),
                     delivery_count=m.delivery_count(), ack=ack,
                     value=None if value is None else value.decode(errors="replace"))
            if a.ack_mode == "explicit":
                res = c.commit_sync(30)
                emit("committed", results={f"{tp.topic}-{tp.partition}": None if e is None else str(e)
                                           for tp, e in res.items()})
            if held:
                holding = True
                emit("holding", records=held)
    except Exception as e:                    # noqa: BLE001 - reported as SharePeer reports it
        emit("fatal", error=repr(e))
        return 2
    finally:
        c.close()
    emit("closed", records=total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
