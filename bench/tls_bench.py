"""What decryption costs: `streamdump read` of the same traffic in plaintext and over TLS, in one run.

    python bench/tls_bench.py [--messages 200000] [--segment 1448] [--repeat 3]

The traffic is NATS (a client publishing messages of --payload bytes, the server delivering them back),
made in memory by Python's ssl (OpenSSL) between two SSLObjects (tests/tls_pairs.py), in TLS 1.3
(AES-256-GCM) and TLS 1.2 (AES-128-GCM, and AES-128-CBC-SHA), with the client's key log. Each
direction's bytes are cut into segments of --segment bytes (1448: a real network's) and written as
pcaps; the plaintext capture holds the same application bytes cut the same way. Each read runs in
a child process (`streamdump read FILE [--tls-keylog KEYS]`, one line a frame, output thrown
away); its CPU time (user and system) is measured, the best of --repeat kept. The target
(issue 36): decryption at most 1.5x plaintext.
"""

from __future__ import annotations

import argparse
import resource
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import dpkt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pcap_writer import tcp_pcap  # noqa: E402
from tls_pairs import converse  # noqa: E402

PORT = 4222


def traffic(messages: int, payload: int) -> list[tuple[bool, bytes]]:
    """INFO, CONNECT, then batches of PUBs and the MSGs they come back as."""
    body = b"x" * payload
    out: list[tuple[bool, bytes]] = [
        (False, b'INFO {"server_id":"S","version":"2.9.10","proto":1,"max_payload":1048576}\r\n'),
        (True, b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB bench.> 1\r\n'),
    ]
    batch = 2000
    for start in range(0, messages, batch):
        n = min(batch, messages - start)
        out.append(
            (True, b"".join(b"PUB bench.%d %d\r\n%s\r\n" % (start + i, payload, body) for i in range(n)))
        )
        out.append(
            (False, b"".join(b"MSG bench.%d 1 %d\r\n%s\r\n" % (start + i, payload, body) for i in range(n)))
        )
    return out


def pcap(chunks: list[tuple[bool, bytes]], segment: int) -> bytes:
    """One connection carrying chunks, cut into segments of at most `segment` bytes, then closed."""
    closing = ((True, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK), (False, dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK))
    return tcp_pcap(chunks, server=("127.0.0.1", PORT), ending=closing, segment=segment)


def timed(args: list[str], repeat: int) -> float:
    """The read's CPU seconds (user and system, of the child): on a shared machine, wall time
    measures the neighbours."""
    best = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "streamdump", "read", *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, cwd=ROOT)  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=100, help="bytes of each message")
    parser.add_argument("--segment", type=int, default=1448)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="streamdump-tls-bench-"))
    exchange = traffic(args.messages, args.payload)
    plain = folder / "plain.pcap"
    plain.write_bytes(pcap(exchange, args.segment))
    runs = [("plaintext", plain, None)]
    for name, version, ciphers in (
        ("TLS 1.3 AES-256-GCM", ssl.TLSVersion.TLSv1_3, None),
        ("TLS 1.2 AES-128-GCM", ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS 1.2 AES-128-CBC-SHA", ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES128-SHA"),
    ):
        conv = converse(exchange, version=version, ciphers=ciphers)
        path = folder / f"{name.replace(' ', '_')}.pcap"
        path.write_bytes(pcap(conv.chunks, args.segment))
        keys = folder / f"{path.stem}.keys"
        keys.write_bytes(conv.keylog)
        runs.append((name, path, keys))
    print(
        f"{args.messages} messages of {args.payload} bytes each way, segments of {args.segment} bytes, "
        f"best of {args.repeat}"
    )
    base = None
    for name, path, keys in runs:
        seconds = timed([str(path), *(["--tls-keylog", str(keys)] if keys else [])], args.repeat)
        base = base or seconds
        size = path.stat().st_size / 1e6
        print(f"{name:<26} {size:7.1f} MB  {seconds:6.2f} s CPU  {seconds / base:5.2f}x plaintext")


if __name__ == "__main__":
    main()
