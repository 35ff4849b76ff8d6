#!/usr/bin/env python3
"""Stand-in RocketMQ name server (127.0.0.1:9876) and broker (127.0.0.1:10911).

No RocketMQ server installs on this machine, so this process plays both parts,
well enough for two real clients (npm ali-ons, PyPI rocketmq 0.4.4 = Apache's C++
client) to run a producer and a push consumer against it. Only the clients' bytes
are "real"; everything this process writes imitates a RocketMQ 4.9.x server:

* Frame: i32 length, i32 header word (serialize type << 24 | header length),
  header, body. Requests are decoded in both serialize types (0 JSON,
  1 ROCKETMQ binary); the answer uses the request's type. (A Java server answers in
  its own configured type whatever the request's; for the real clients, which send
  JSON, both agree, and the binary scenario plays a server configured for ROCKETMQ.)
* JSON answers are written the way fastjson writes a Java RemotingCommand: keys of
  the command sorted (code, extFields, flag, language, opaque, remark,
  serializeTypeCurrentRPC, version), remark left out when null, no spaces, every
  extFields value a string, extFields in java.util.HashMap iteration order.
* Route data (GET_ROUTEINTO_BY_TOPIC) is written like fastjson writes TopicRouteData:
  brokerAddrs is a HashMap<Long, String>, so its key comes out unquoted,
  {0:"127.0.0.1:10911"}, unless the request's version is >= 401 (V4_9_4), for which
  4.9.x name servers switch to standard JSON (quoted keys). Both clients recorded
  here send old versions (ali-ons 121, C++ 1.2.x 63) and both parse the unquoted key.
* Stored messages for PULL_MESSAGE answers come from stored.encode_stored_messages.

Scenario switches:
  --topics A,B          topics the name server knows (default TopicTest,TBW102);
                        %RETRY%<group> topics are always known. Any other topic
                        is answered 17 TOPIC_NOT_EXIST, remark
                        "No topic route info in name server for the topic: X"
                        (--faq-suffix adds the real server's FAQ line).
  --refuse-send CODE[:N]  answer the first N sends (all when N is left out) with
                        CODE (e.g. 16 NO_PERMISSION) and --refuse-remark.
  --drop CODE[:N]       leave the first N requests with request code CODE (all
                        when N is left out) unanswered; the connection stays open.
  --pull-hold SECONDS   longest time a pull that finds nothing is held (long
                        polling) before PULL_NOT_FOUND; 0 answers at once.
  --log FILE            one JSON line per decoded frame (both directions).

Prints "READY" on stdout once both ports listen; SIGINT/SIGTERM stop it.
"""

import argparse
import asyncio
import json
import signal
import socket
import struct
import sys
import time

from stored import encode_stored_messages

HOST = "127.0.0.1"
SERVER_VERSION = 401  # MQVersion.Version.V4_9_4.ordinal()

# request codes
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
SEARCH_OFFSET_BY_TIMESTAMP = 29
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
CONSUMER_SEND_MSG_BACK = 36
END_TRANSACTION = 37
GET_CONSUMER_LIST_BY_GROUP = 38
GET_KV_CONFIG = 101
GET_ROUTEINTO_BY_TOPIC = 105
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
SEND_CODES = (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE)

# response codes
SUCCESS = 0
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22

LANGUAGES = [
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
]

# SEND_MESSAGE_V2 abbreviates the header field names.
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2

FAQ_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


# ---------------------------------------------------------------- Java look-alikes


def java_string_hash(s):
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys):
    """Iteration order of a java.util.HashMap<String, ?> filled with keys in this order."""
    keys = list(dict.fromkeys(keys))
    cap = 16
    while len(keys) > cap * 3 // 4:
        cap *= 2

    def bucket(k):
        h = java_string_hash(k)
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(keys, key=lambda k: (bucket(k), keys.index(k)))


def java_map(d):
    return {k: d[k] for k in java_hashmap_order(d)}


def parse_properties(s):
    props = {}
    for item in s.split("\x02"):
        if not item:
            continue
        name, _, value = item.partition("\x01")
        props[name] = value
    return props


# ---------------------------------------------------------------- remoting codec


class Command:
    def __init__(
        self,
        code,
        opaque,
        flag=0,
        language="JAVA",
        version=SERVER_VERSION,
        remark=None,
        ext=None,
        body=b"",
        serialize=0,
    ):
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version
        self.remark = remark
        self.ext = ext  # dict or None
        self.body = body
        self.serialize = serialize
        self.raw_header = b""

    @property
    def oneway(self):
        return bool(self.flag & 2)


def decode_frame(frame):
    """frame = bytes after the length word."""
    (word,) = struct.unpack_from(">I", frame, 0)
    serialize, hlen = word >> 24, word & 0xFFFFFF
    header = frame[4 : 4 + hlen]
    body = frame[4 + hlen :]
    if serialize == 0:
        obj = json.loads(header.decode("utf-8"))
        cmd = Command(
            obj.get("code"),
            obj.get("opaque"),
            obj.get("flag", 0),
            obj.get("language"),
            obj.get("version"),
            obj.get("remark"),
            obj.get("extFields"),
            body,
            0,
        )
        cmd.json = obj
    elif serialize == 1:
        code, lang, version, opaque, flag = struct.unpack_from(">hBhii", header, 0)
        pos = 13
        (rlen,) = struct.unpack_from(">i", header, pos)
        pos += 4
        remark = header[pos : pos + rlen].decode("utf-8") if rlen > 0 else None
        pos += max(rlen, 0)
        (elen,) = struct.unpack_from(">i", header, pos)
        pos += 4
        ext, end = {}, pos + max(elen, 0)
        while pos < end:
            (klen,) = struct.unpack_from(">H", header, pos)
            pos += 2
            k = header[pos : pos + klen].decode("utf-8")
            pos += klen
            (vlen,) = struct.unpack_from(">i", header, pos)
            pos += 4
            ext[k] = header[pos : pos + vlen].decode("utf-8")
            pos += vlen
        cmd = Command(
            code,
            opaque,
            flag,
            LANGUAGES[lang] if lang < len(LANGUAGES) else lang,
            version,
            remark,
            ext or None,
            body,
            1,
        )
        cmd.json = None
    else:
        raise ValueError(f"unknown serialize type {serialize}")
    cmd.raw_header = header
    return cmd


def encode_command(cmd):
    ext = None
    if cmd.ext is not None:
        ext = java_map({k: str(v) for k, v in cmd.ext.items()})
    if cmd.serialize == 1:
        lang = LANGUAGES.index(cmd.language) if cmd.language in LANGUAGES else 0
        remark = (cmd.remark or "").encode("utf-8")
        ext_bytes = b""
        for k, v in (ext or {}).items():
            kb, vb = k.encode(), v.encode()
            ext_bytes += struct.pack(">H", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
        header = (
            struct.pack(">hBhii", cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)
            + struct.pack(">i", len(remark))
            + remark
            + struct.pack(">i", len(ext_bytes))
            + ext_bytes
        )
        word = (1 << 24) | len(header)
    else:
        obj = {"code": cmd.code}
        if ext is not None:
            obj["extFields"] = ext
        obj["flag"] = cmd.flag
        obj["language"] = cmd.language
        obj["opaque"] = cmd.opaque
        if cmd.remark is not None:
            obj["remark"] = cmd.remark
        obj["serializeTypeCurrentRPC"] = "JSON"
        obj["version"] = cmd.version
        header = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        word = len(header)
    cmd.raw_header = header
    return struct.pack(">iI", 4 + len(header) + len(cmd.body), word) + header + cmd.body


def route_json(topic_queues, broker_name, cluster, broker_addr, quoted_keys):
    """TopicRouteData as fastjson writes it (bean fields sorted)."""
    addr_key = '"0"' if quoted_keys else "0"
    name, addr = json.dumps(broker_name), json.dumps(broker_addr)
    broker = f'{{"brokerAddrs":{{{addr_key}:{addr}}},"brokerName":{name},"cluster":{json.dumps(cluster)}}}'
    queue = (
        f'{{"brokerName":{name},"perm":6,"readQueueNums":{topic_queues},'
        f'"topicSysFlag":0,"writeQueueNums":{topic_queues}}}'
    )
    return f'{{"brokerDatas":[{broker}],"filterServerTable":{{}},"queueDatas":[{queue}]}}'.encode()


# ---------------------------------------------------------------- the stand-in


class StandIn:
    def __init__(self, args):
        self.args = args
        self.topics = {t for t in args.topics.split(",") if t}
        self.queues = args.queues
        self.broker_addr = f"{HOST}:{args.broker_port}"
        self.refuse = args.refuse_send
        self.drops = {code: n for code, n in args.drop}
        # Open for the stand-in's whole life; closed when it stops.
        self.log = open(args.log, "w") if args.log else None  # noqa: SIM115
        # broker state
        self.store = {}  # (topic, queueId) -> [message dict]
        self.commitlog = 0  # next physical offset
        self.offsets = {}  # (group, topic, queueId) -> consumer offset
        self.groups = {}  # consumer group -> {clientID}
        self.waiters = {}  # (topic, queueId) -> set of futures (held pulls)
        self.tasks = set()

    # -------------------------------------------------------------- logging
    def note(self, server, peer, direction, cmd):
        if not self.log:
            return
        rec = {
            "t": round(time.time(), 6),
            "server": server,
            "peer": peer,
            "dir": direction,
            "code": cmd.code,
            "opaque": cmd.opaque,
            "flag": cmd.flag,
            "serialize": cmd.serialize,
            "language": cmd.language,
            "version": cmd.version,
            "header_len": len(cmd.raw_header),
            "body_len": len(cmd.body),
        }
        if cmd.remark is not None:
            rec["remark"] = cmd.remark
        if cmd.serialize == 0 and cmd.raw_header:
            text = cmd.raw_header.decode("utf-8", "replace")
            stripped = text.rstrip()
            if stripped != text:
                rec["header_trailing"] = text[len(stripped) :]
            rec["header_keys"] = list(json.loads(text).keys())
        if cmd.ext:
            rec["ext"] = cmd.ext
            rec["ext_types"] = sorted({type(v).__name__ for v in cmd.ext.values()})
        self.log.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self.log.flush()

    # -------------------------------------------------------------- connections
    async def serve(self, server, reader, writer):
        peer = writer.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}"
        conn_tasks = set()
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                (length,) = struct.unpack(">i", head)
                frame = await reader.readexactly(length)
                try:
                    cmd = decode_frame(frame)
                except Exception as exc:  # malformed: say so and drop the connection
                    print(f"standin: {server} {peer_s}: undecodable frame: {exc}", file=sys.stderr)
                    break
                self.note(server, peer_s, "in", cmd)
                if cmd.flag & 1:
                    continue  # a response to something we never ask: ignore
                n = self.drops.get(cmd.code)
                if n is not None and n != 0:
                    self.drops[cmd.code] = n - 1 if n > 0 else n
                    print(
                        f"standin: {server}: leaving request code {cmd.code} opaque {cmd.opaque} unanswered",
                        file=sys.stderr,
                    )
                    continue
                task = asyncio.ensure_future(self.answer(server, peer, peer_s, cmd, writer))
                conn_tasks.add(task)
                task.add_done_callback(conn_tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for t in conn_tasks:
                t.cancel()
            writer.close()

    async def answer(self, server, peer, peer_s, cmd, writer):
        try:
            if server == "namesrv":
                resp = self.namesrv(cmd)
            else:
                resp = await self.broker(cmd, peer)
        except asyncio.CancelledError:
            return
        if resp is None or cmd.oneway:
            return
        resp.opaque = cmd.opaque
        resp.flag = 1
        resp.serialize = cmd.serialize
        data = encode_command(resp)
        self.note(server, peer_s, "out", resp)
        if not writer.is_closing():
            writer.write(data)

    # -------------------------------------------------------------- name server
    def topic_known(self, topic):
        return topic in self.topics or topic.startswith("%RETRY%") or topic.startswith("%DLQ%")

    def queue_count(self, topic):
        return 1 if topic.startswith("%RETRY%") or topic.startswith("%DLQ%") else self.queues

    def namesrv(self, cmd):
        ext = cmd.ext or {}
        if cmd.code == GET_ROUTEINTO_BY_TOPIC:
            topic = str(ext.get("topic", ""))
            if not self.topic_known(topic):
                remark = "No topic route info in name server for the topic: " + topic
                if self.args.faq_suffix:
                    remark += FAQ_SUFFIX
                return Command(TOPIC_NOT_EXIST, 0, remark=remark)
            quoted = (cmd.version or 0) >= 401 or str(ext.get("acceptStandardJsonOnly", "")).lower() == "true"
            body = route_json(
                self.queue_count(topic), self.args.broker_name, self.args.cluster, self.broker_addr, quoted
            )
            return Command(SUCCESS, 0, body=body)
        if cmd.code == GET_KV_CONFIG:
            return Command(
                QUERY_NOT_FOUND,
                0,
                remark="No config item, Namespace: {} Key: {}".format(ext.get("namespace"), ext.get("key")),
            )
        return Command(REQUEST_CODE_NOT_SUPPORTED, 0, remark=f" request type {cmd.code} not supported")

    # -------------------------------------------------------------- broker
    async def broker(self, cmd, peer):
        ext = {k: v for k, v in (cmd.ext or {}).items()}
        code = cmd.code
        if code in SEND_CODES:
            return self.send(cmd, ext, peer)
        if code == PULL_MESSAGE:
            return await self.pull(ext)
        if code == HEART_BEAT:
            try:
                hb = json.loads(cmd.body.decode("utf-8"))
            except Exception:
                hb = {}
            cid = hb.get("clientID")
            for c in hb.get("consumerDataSet") or []:
                self.groups.setdefault(c.get("groupName"), set()).add(cid)
            return Command(SUCCESS, 0)
        if code == UNREGISTER_CLIENT:
            group = ext.get("consumerGroup")
            if group and group in self.groups:
                self.groups[group].discard(ext.get("clientID"))
            return Command(SUCCESS, 0)
        if code == GET_CONSUMER_LIST_BY_GROUP:
            group = ext.get("consumerGroup")
            ids = sorted(self.groups.get(group) or [])
            if not ids:
                return Command(SYSTEM_ERROR, 0, remark=f"no consumer for this group, {group}")
            return Command(
                SUCCESS, 0, body=json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode()
            )
        if code == QUERY_CONSUMER_OFFSET:
            key = (ext.get("consumerGroup"), ext.get("topic"), int(ext.get("queueId", 0)))
            # real broker: no stored offset and the queue still starts at 0 -> SUCCESS, offset 0
            return Command(SUCCESS, 0, ext={"offset": self.offsets.get(key, 0)})
        if code == UPDATE_CONSUMER_OFFSET:
            key = (ext.get("consumerGroup"), ext.get("topic"), int(ext.get("queueId", 0)))
            self.offsets[key] = int(ext.get("commitOffset", 0))
            return Command(SUCCESS, 0)
        if code in (GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP):
            q = self.store.get((ext.get("topic"), int(ext.get("queueId", 0))), [])
            return Command(SUCCESS, 0, ext={"offset": len(q) if code == GET_MAX_OFFSET else 0})
        if code == GET_MIN_OFFSET:
            return Command(SUCCESS, 0, ext={"offset": 0})
        if code in (CONSUMER_SEND_MSG_BACK, END_TRANSACTION):
            return Command(SUCCESS, 0)
        return Command(REQUEST_CODE_NOT_SUPPORTED, 0, remark=f" request type {code} not supported")

    def send(self, cmd, ext, peer):
        if cmd.code == SEND_MESSAGE_V2:
            ext = {V2_NAMES.get(k, k): v for k, v in ext.items()}
        code, n = self.refuse if self.refuse else (None, 0)
        if code is not None and n != 0:
            if n > 0:
                self.refuse = (code, n - 1)
            return Command(code, 0, remark=self.args.refuse_remark)
        topic = str(ext.get("topic"))
        qid = int(ext.get("queueId", 0))
        if not 0 <= qid < self.queue_count(topic):
            qid = 0
        bodies = []
        # The broker decides by the header's batch field, read with Boolean.parseBoolean:
        # the C++ client's SEND_MESSAGE with "batch":"1" is therefore NOT a batch for a
        # real 4.9 broker (rocketmq-client-cpp issues #189, #363): stored as one message.
        if cmd.code == SEND_BATCH_MESSAGE or str(ext.get("batch", "")).lower() == "true":
            bodies = decode_batch(cmd.body)
        else:
            bodies = [(int(ext.get("flag", 0)), cmd.body, parse_properties(str(ext.get("properties", ""))))]
        q = self.store.setdefault((topic, qid), [])
        first_offset, msg_ids = len(q), []
        now = int(time.time() * 1000)
        for flag, body, props in bodies:
            props = dict(props)
            props["CLUSTER"] = self.args.cluster  # the real broker adds its cluster name
            props.pop("WAIT", None)  # and does not store WAIT=true
            m = {
                "queue_id": qid,
                "flag": flag,
                "queue_offset": len(q),
                "physical_offset": self.commitlog,
                "sys_flag": int(ext.get("sysFlag", 0)),
                "born_timestamp": int(ext.get("bornTimestamp", now)),
                "born_host": (peer[0], peer[1]),
                "store_timestamp": now,
                "store_host": (HOST, self.args.broker_port),
                "reconsume_times": int(ext.get("reconsumeTimes", 0) or 0),
                "prepared_transaction_offset": 0,
                "body": body,
                "topic": topic,
                "properties": java_map(props),
            }
            size = len(encode_stored_messages([m]))
            msg_ids.append(
                (socket.inet_aton(HOST) + struct.pack(">iq", self.args.broker_port, self.commitlog))
                .hex()
                .upper()
            )
            self.commitlog += size
            q.append(m)
        for fut in self.waiters.pop((topic, qid), set()):
            if not fut.done():
                fut.set_result(True)
        resp_ext = {"msgId": ",".join(msg_ids), "queueId": qid, "queueOffset": first_offset}
        resp = Command(SUCCESS, 0, ext=resp_ext)
        # SendMessageProcessor adds these two after the custom header
        resp.ext["MSG_REGION"] = "DefaultRegion"
        resp.ext["TRACE_ON"] = "true"
        return resp

    def lookup(self, topic, qid, offset, max_nums, subscription):
        q = self.store.get((topic, qid), [])
        maxo = len(q)
        tags = None
        if subscription and subscription.strip() not in ("*", ""):
            tags = {t.strip() for t in subscription.split("||") if t.strip()}
        if offset > maxo:
            return PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", [], maxo, maxo
        if maxo == 0:
            return PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", [], 0, maxo
        if offset == maxo:
            return PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", [], offset, maxo
        found, nxt = [], offset
        for m in q[offset:]:
            if len(found) >= max_nums:
                break
            nxt = m["queue_offset"] + 1
            if tags is None or m["properties"].get("TAGS") in tags:
                found.append(m)
        if not found:
            return PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", [], nxt, maxo
        return SUCCESS, "FOUND", found, nxt, maxo

    async def pull(self, ext):
        topic = str(ext.get("topic"))
        qid = int(ext.get("queueId", 0))
        group = ext.get("consumerGroup")
        offset = int(ext.get("queueOffset", 0))
        max_nums = int(ext.get("maxMsgNums", 32))
        sys_flag = int(ext.get("sysFlag", 0))
        subscription = ext.get("subscription")
        if sys_flag & PULL_FLAG_COMMIT_OFFSET and int(ext.get("commitOffset", -1)) >= 0:
            self.offsets[(group, topic, qid)] = int(ext["commitOffset"])
        code, status, found, nxt, maxo = self.lookup(topic, qid, offset, max_nums, subscription)
        if code == PULL_NOT_FOUND and sys_flag & PULL_FLAG_SUSPEND and self.args.pull_hold > 0:
            hold = min(self.args.pull_hold, int(ext.get("suspendTimeoutMillis", 15000)) / 1000.0)
            fut = asyncio.get_running_loop().create_future()
            self.waiters.setdefault((topic, qid), set()).add(fut)
            try:
                await asyncio.wait_for(fut, hold)
            except TimeoutError:
                pass
            finally:
                self.waiters.get((topic, qid), set()).discard(fut)
            code, status, found, nxt, maxo = self.lookup(topic, qid, offset, max_nums, subscription)
        resp_ext = {"suggestWhichBrokerId": 0, "nextBeginOffset": nxt, "minOffset": 0, "maxOffset": maxo}
        body = encode_stored_messages(found) if found else b""
        return Command(code, 0, remark=status, ext=resp_ext, body=body)


def decode_batch(data):
    """SEND_BATCH_MESSAGE body: MessageDecoder.encodeMessages() of the client."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (total,) = struct.unpack_from(">i", data, pos)
        _, _, flag, blen = struct.unpack_from(">iiii", data, pos + 4)
        p = pos + 20
        body = data[p : p + blen]
        p += blen
        (plen,) = struct.unpack_from(">h", data, p)
        p += 2
        props = parse_properties(data[p : p + plen].decode("utf-8"))
        out.append((flag, body, props))
        pos += total
    return out


def code_count(text):
    code, _, n = text.partition(":")
    return int(code), (int(n) if n else -1)


async def main(args):
    standin = StandIn(args)
    ns = await asyncio.start_server(
        lambda r, w: standin.serve("namesrv", r, w), HOST, args.namesrv_port, reuse_address=True
    )
    br = await asyncio.start_server(
        lambda r, w: standin.serve("broker", r, w), HOST, args.broker_port, reuse_address=True
    )
    print("READY", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    ns.close()
    br.close()
    for fs in standin.waiters.values():
        for f in fs:
            f.cancel()
    if standin.log:
        standin.log.close()
    stored = sum(len(v) for v in standin.store.values())
    print(f"standin: stopped, {stored} message(s) stored", file=sys.stderr)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv-port", type=int, default=9876)
    p.add_argument("--broker-port", type=int, default=10911)
    p.add_argument("--broker-name", default="broker-a")
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument("--topics", default="TopicTest,TBW102")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--faq-suffix", action="store_true")
    p.add_argument("--refuse-send", type=code_count, default=None, metavar="CODE[:N]")
    p.add_argument("--refuse-remark", default="the broker[127.0.0.1] sending message is forbidden")
    p.add_argument("--drop", type=code_count, action="append", default=[], metavar="CODE[:N]")
    p.add_argument("--pull-hold", type=float, default=2.0)
    p.add_argument("--log")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
