#!/usr/bin/env python3
"""Record RocketMQ remoting traffic between real clients and the stand-in, on loopback.

    python3 record.py                 # every default scenario
    python3 record.py alions cpp_producer
    python3 record.py --summary FILE.pcap ...   # only decode and list existing captures

For each scenario:
  1. tcpdump -i lo -U --immediate-mode -w NAME.pcap 'tcp port 9876 or tcp port 10911'
     (started first; we wait until it says it is listening),
  2. standin.py with the scenario's switches (we wait for its READY),
  3. the client (node client_alions.js or python3 client_rocketmq.py) with a time limit,
  4. stand-in stopped (SIGINT), then tcpdump stopped (SIGINT),
  5. checks: the capture is non-empty and under 200 KB, it decodes as RocketMQ
     remoting frames, and holds the request / response codes the scenario is for.
Then prints, per capture, every frame in capture order.

Scenarios (see README.md):
  alions         ali-ons push consumer + producer, 6 messages sent and pulled back
  cpp_producer   rocketmq 0.4.4 (C++) producer: 4 sends + 1 batch send
  topic_missing  C++ producer asks for a topic the name server does not know (17)
  send_refused   ali-ons producer, the broker refuses the send (16 NO_PERMISSION)
  unanswered     C++ producer whose first SEND_MESSAGE is left unanswered; the client
                 times out (1.5 s), reconnects and sends again
  binary         client_binary.py: ROCKETMQ binary headers built by streamdump's encoder,
                 a zlib-compressed body and a one-way offset update
"""

import argparse
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PORTS = (9876, 10911)
FILTER = "tcp port 9876 or tcp port 10911"
MAX_BYTES = 200 * 1024

NODE_CLIENT = ["node", os.path.join(HERE, "client_alions.js")]
CPP_CLIENT = [sys.executable, os.path.join(HERE, "client_rocketmq.py")]
BINARY_CLIENT = [sys.executable, os.path.join(HERE, "client_binary.py")]

# name -> stand-in switches, client command, request / response codes that must be in the
# capture, whether a request must be left unanswered, client time limit in seconds
SCENARIOS = {
    "alions": dict(
        standin=["--pull-hold", "1.0"],
        client=[*NODE_CLIENT, "--mode", "both", "--count", "6"],
        requests={105, 34, 38, 14, 11, 310, 15, 35},
        responses={0, 19},
        limit=40,
    ),
    "cpp_producer": dict(
        standin=[],
        client=[*CPP_CLIENT, "--count", "4", "--batch"],
        requests={105, 10, 34, 35},
        responses={0},
        limit=30,
    ),
    "topic_missing": dict(
        standin=["--topics", "TopicTest"],
        client=[*CPP_CLIENT, "--topic", "NoSuchTopic", "--expect-fail"],
        requests={105},
        responses={17},
        limit=30,
    ),
    "send_refused": dict(
        standin=["--refuse-send", "16"],
        client=[*NODE_CLIENT, "--mode", "produce", "--count", "1", "--expect-fail"],
        requests={105, 310, 35},
        responses={16},
        limit=30,
    ),
    "binary": dict(
        standin=["--pull-hold", "0"],
        client=BINARY_CLIENT,
        requests={105, 310, 11, 15, 35},
        responses={0},
        limit=30,
    ),
    "unanswered": dict(
        standin=["--drop", "10:1"],
        client=[*CPP_CLIENT, "--count", "2", "--timeout-ms", "1500"],
        requests={105, 10, 35},
        responses={0},
        unanswered=True,
        limit=30,
    ),
}
DEFAULT = ["alions", "cpp_producer", "topic_missing", "send_refused", "unanswered", "binary"]

REQUEST_NAMES = {
    10: "SEND_MESSAGE",
    11: "PULL_MESSAGE",
    14: "QUERY_CONSUMER_OFFSET",
    15: "UPDATE_CONSUMER_OFFSET",
    29: "SEARCH_OFFSET_BY_TIMESTAMP",
    30: "GET_MAX_OFFSET",
    34: "HEART_BEAT",
    35: "UNREGISTER_CLIENT",
    36: "CONSUMER_SEND_MSG_BACK",
    38: "GET_CONSUMER_LIST_BY_GROUP",
    101: "GET_KV_CONFIG",
    105: "GET_ROUTEINTO_BY_TOPIC",
    310: "SEND_MESSAGE_V2",
    320: "SEND_BATCH_MESSAGE",
}
RESPONSE_NAMES = {
    0: "SUCCESS",
    1: "SYSTEM_ERROR",
    3: "REQUEST_CODE_NOT_SUPPORTED",
    16: "NO_PERMISSION",
    17: "TOPIC_NOT_EXIST",
    19: "PULL_NOT_FOUND",
    20: "PULL_RETRY_IMMEDIATELY",
    21: "PULL_OFFSET_MOVED",
    22: "QUERY_NOT_FOUND",
}


# ------------------------------------------------------------------ pcap decoding


def read_pcap(path):
    """Yield (ts, src, sport, dst, dport, seq, flags, payload) for IPv4/TCP packets."""
    with open(path, "rb") as f:
        data = f.read()
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a classic pcap file")
    nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
    (linktype,) = struct.unpack_from(endian + "I", data, 20)
    if linktype != 1:
        raise ValueError(f"{path}: link type {linktype}, expected 1 (Ethernet)")
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, pos)
        pkt = data[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        ts = sec + frac / (1e9 if nano else 1e6)
        if len(pkt) < 14 or struct.unpack_from(">H", pkt, 12)[0] != 0x0800:
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            continue
        (total,) = struct.unpack_from(">H", ip, 2)
        src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
        off = (tcp[12] >> 4) * 4
        flags = tcp[13]
        yield ts, src, sport, dst, dport, seq, flags, bytes(tcp[off:])


def decode_frames(stream):
    """stream: list of (ts, bytes) chunks in sequence order -> list of (ts, frame dict)."""
    buf, marks = b"", []
    for ts, chunk in stream:
        marks.append((len(buf), ts))
        buf += chunk

    def ts_at(off):
        t = marks[0][1] if marks else 0
        for start, mt in marks:
            if start <= off:
                t = mt
        return t

    out, pos = [], 0
    while pos + 8 <= len(buf):
        length, word = struct.unpack_from(">iI", buf, pos)
        if pos + 4 + length > len(buf):
            out.append((ts_at(pos), {"truncated": True, "length": length, "have": len(buf) - pos - 4}))
            break
        frame = buf[pos + 4 : pos + 4 + length]
        ser, hlen = word >> 24, word & 0xFFFFFF
        header = frame[4 : 4 + hlen]
        f = {
            "length": length,
            "serialize": ser,
            "header_len": hlen,
            "body_len": length - 4 - hlen,
            "header_bytes": header,
        }
        if ser == 0:
            obj = json.loads(header.decode("utf-8"))
            f.update(
                code=obj.get("code"),
                opaque=obj.get("opaque"),
                flag=obj.get("flag", 0),
                language=obj.get("language"),
                version=obj.get("version"),
                remark=obj.get("remark"),
                ext=obj.get("extFields") or {},
                keys=list(obj),
            )
            f["trailing"] = header.decode("utf-8")[len(header.decode("utf-8").rstrip()) :]
        elif ser == 1:
            code, lang, version, opaque, flag = struct.unpack_from(">hBhii", header, 0)
            f.update(code=code, opaque=opaque, flag=flag, language=lang, version=version, remark=None, ext={})
        out.append((ts_at(pos), f))
        pos += 4 + length
    return out


def conversations(path):
    """{(client, server): {"c2s": [...], "s2c": [...]}} of decoded frames."""
    segs = {}
    for ts, src, sport, dst, dport, seq, _flags, payload in read_pcap(path):
        if not payload:
            continue
        key = (src, sport, dst, dport)
        segs.setdefault(key, {})
        segs[key].setdefault(seq, (ts, payload))  # first copy wins (retransmissions)
    convs = {}
    for (src, sport, dst, dport), by_seq in segs.items():
        ordered = [by_seq[s] for s in sorted(by_seq)]
        frames = decode_frames(ordered)
        if dport in PORTS:
            conv, direction = ((f"{src}:{sport}", f"{dst}:{dport}"), "c2s")
        else:
            conv, direction = ((f"{dst}:{dport}", f"{src}:{sport}"), "s2c")
        convs.setdefault(conv, {"c2s": [], "s2c": []})[direction] = frames
    return convs


def summarize(path, out=sys.stdout):
    convs = conversations(path)
    events = []
    for (client, server), dirs in convs.items():
        srv = "namesrv" if server.endswith(":9876") else "broker"
        for direction, frames in dirs.items():
            for ts, f in frames:
                events.append((ts, direction, srv, client, f))
    events.sort(key=lambda e: e[0])
    t0 = events[0][0] if events else 0
    size = os.path.getsize(path)
    print(
        f"== {os.path.basename(path)}: {size} bytes, {len(convs)} TCP connection(s) with payload, "
        f"{len(events)} remoting frame(s)",
        file=out,
    )
    answered = set()
    for _ts, direction, _srv, client, f in events:
        if direction == "s2c" and "opaque" in f:
            answered.add((client, f["opaque"]))
    for _ts, direction, _srv, client, f in events:
        if f.get("truncated"):
            print(
                f"  {ts - t0:8.3f} {client:>16} TRUNCATED frame ({f['have']} of {f['length']} bytes)",
                file=out,
            )
            continue
        arrow = "->" if direction == "c2s" else "<-"
        resp = bool(f["flag"] & 1)
        names = RESPONSE_NAMES if resp else REQUEST_NAMES
        name = names.get(f["code"], "?")
        extra = []
        if not resp and f["flag"] & 2:
            extra.append("oneway")
        if not resp and (client, f["opaque"]) not in answered and not f["flag"] & 2:
            extra.append("UNANSWERED")
        if f.get("remark"):
            extra.append("remark=" + json.dumps(f["remark"]))
        if f.get("trailing"):
            extra.append("header ends with " + json.dumps(f["trailing"]))
        if f["ext"].get("topic") is not None and not resp:
            extra.append("topic=" + str(f["ext"]["topic"]))
        nums = sorted(k for k, v in f["ext"].items() if not isinstance(v, str))
        if nums:
            extra.append("non-string ext: " + ",".join(nums))
        ser = {0: "JSON", 1: "ROCKETMQ"}.get(f["serialize"], f["serialize"])
        print(
            f"  {ts - t0:8.3f} {client:>16} {arrow} {srv:7} {'resp' if resp else 'req '} "
            f"{f['code']:>3} {name:26} opaque={f['opaque']:<3} {ser} lang={f['language']} v={f['version']} "
            f"hdr={f['header_len']} body={f['body_len']} {' '.join(extra)}",
            file=out,
        )
    return events


# ------------------------------------------------------------------ recording


def wait_for_line(proc_stream, needle, timeout):
    """Read lines from a text stream until one contains needle."""
    deadline = time.time() + timeout
    lines = []
    while time.time() < deadline:
        ready, _, _ = select.select([proc_stream], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        line = proc_stream.readline()
        if not line:
            break  # EOF: the process is gone
        lines.append(line)
        if needle in line:
            return lines
    raise RuntimeError(f"did not see {needle!r} within {timeout}s; got {lines!r}")


def port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def stop(proc, sig=signal.SIGINT, timeout=10):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def record(name, outdir, logdir):
    sc = SCENARIOS[name]
    standin_args, client_cmd, limit = sc["standin"], sc["client"], sc["limit"]
    want_req, want_resp = sc["requests"], sc["responses"]
    for port in PORTS:
        if not port_free(port):
            raise RuntimeError(f"port {port} is busy: stop whatever listens there first")
    pcap = os.path.join(outdir, f"{name}.pcap")
    if os.path.exists(pcap):
        os.remove(pcap)
    tcpdump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-w", pcap, FILTER],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    standin = client = None
    try:
        wait_for_line(tcpdump.stderr, "listening on", 10)
        standin_log = os.path.join(logdir, f"{name}.standin.jsonl")
        standin = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "standin.py"), "--log", standin_log, *standin_args],
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=open(os.path.join(logdir, f"{name}.standin.err"), "w"),  # noqa: SIM115 (the child's)
            text=True,
        )
        wait_for_line(standin.stdout, "READY", 10)
        env = dict(os.environ)
        cmd = list(client_cmd)
        if cmd[0] == sys.executable:
            cmd += ["--log-dir", os.path.join(logdir, "cpp-client-logs")]
        client = subprocess.run(cmd, cwd=HERE, env=env, timeout=limit, capture_output=True, text=True)
        with open(os.path.join(logdir, f"{name}.client.out"), "w") as f:
            f.write(client.stdout + client.stderr)
        time.sleep(0.3)
    finally:
        if standin is not None:
            stop(standin)
        time.sleep(0.3)
        stop(tcpdump)
    tail = tcpdump.stderr.read().strip().splitlines()
    if os.path.exists(pcap):  # tcpdump drops root for user tcpdump: give the file back
        os.chown(pcap, os.getuid(), os.getgid())
    print(f"[{name}] client exit {client.returncode}; tcpdump: {' / '.join(tail[-3:])}")
    for line in (client.stdout + client.stderr).strip().splitlines():
        print(f"[{name}]   {line}")
    problems = []
    if client.returncode != 0:
        problems.append(f"client exited {client.returncode}")
    size = os.path.getsize(pcap) if os.path.exists(pcap) else 0
    if size <= 24:
        problems.append("capture is empty")
    if size >= MAX_BYTES:
        problems.append(f"capture is {size} bytes, not under {MAX_BYTES}")
    if size > 24:
        events = summarize(pcap)
        reqs = {f["code"] for _, d, _, _, f in events if d == "c2s" and "code" in f}
        resps = {f["code"] for _, d, _, _, f in events if d == "s2c" and "code" in f}
        if want_req - reqs:
            problems.append(f"request codes missing: {sorted(want_req - reqs)}")
        if want_resp - resps:
            problems.append(f"response codes missing: {sorted(want_resp - resps)}")
        opaques = {(c, f["opaque"]) for _, d, _, c, f in events if d == "s2c" and "opaque" in f}
        unanswered = [
            f["opaque"]
            for _, d, _, c, f in events
            if d == "c2s" and "opaque" in f and not f["flag"] & 2 and (c, f["opaque"]) not in opaques
        ]
        if sc.get("unanswered") and not unanswered:
            problems.append("no request was left unanswered")
        if any(f.get("truncated") for *_, f in events):
            problems.append("a frame is cut short")
    print(f"[{name}] {'OK' if not problems else 'PROBLEMS: ' + '; '.join(problems)}\n")
    return not problems


def main():
    ap = argparse.ArgumentParser(description="record RocketMQ captures against the stand-in")
    ap.add_argument("scenarios", nargs="*", help=f"default: {' '.join(DEFAULT)}")
    ap.add_argument("--outdir", default=HERE)
    ap.add_argument("--logdir", default=None, help="keep stand-in / client logs here (default: a temp dir)")
    ap.add_argument("--summary", nargs="+", metavar="PCAP", help="only list the frames of these captures")
    a = ap.parse_args()
    if a.summary:
        for p in a.summary:
            summarize(p)
        return 0
    names = a.scenarios or DEFAULT
    for n in names:
        if n not in SCENARIOS:
            ap.error(f"unknown scenario {n!r}; known: {', '.join(SCENARIOS)}")
    logdir = a.logdir or tempfile.mkdtemp(prefix="rmq-record-")
    os.makedirs(logdir, exist_ok=True)
    print(f"logs in {logdir}\n")
    ok = all([record(n, a.outdir, logdir) for n in names])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
