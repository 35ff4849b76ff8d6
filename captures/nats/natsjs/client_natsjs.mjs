// The nats.js 3.x application captures/nats/record.py records (scenario natsjs_*), against the
// machine's nats-server on 127.0.0.1:4222. Every byte on the wire is nats.js's or the server's.
//
//   node client_natsjs.mjs jetstream|kv_obj|services
//
// jetstream: a stream, publishes without headers (nats.js sends HPUB with a header block of size
//   0) and a duplicate (same Nats-Msg-Id), a pull consumer fetching with +ACK, -NAK, +WPI, +TERM
//   and +NXT, a pull that gets its messages at once, and one that gets none (idle heartbeats,
//   then 408 Request Timeout).
// kv_obj: a KV bucket (put, update, an update with a stale revision refused with 10071, get,
//   a get of a missing key, delete, purge), an object store (an object in 4 chunks, read back).
// services: a micro service whose endpoint answers an error (Nats-Service-Error), discovered
//   with $SRV.PING, $SRV.INFO and $SRV.STATS.
import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { Svcm } from "@nats-io/services";

const SERVER = "127.0.0.1:4222";
const enc = new TextEncoder();
const dec = new TextDecoder();

async function cleanup() {
  // Run before tcpdump starts (record.py): earlier runs' streams and buckets go.
  const nc = await connect({ servers: SERVER });
  const jsm = await jetstreamManager(nc);
  for (const name of ["ORDERS_JS", "KV_profiles", "OBJ_files"]) {
    try { await jsm.streams.delete(name); } catch { /* not there */ }
  }
  await nc.close();
}

async function jetstreamScenario() {
  const nc = await connect({ servers: SERVER, name: "natsjs-orders" });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "ORDERS_JS", subjects: ["shop.orders.>"] });
  const js = jetstream(nc);
  for (let i = 1; i <= 4; i++) {
    await js.publish("shop.orders.created", JSON.stringify({ id: i }));
  }
  const first = await js.publish("shop.orders.paid", "paid 1", { msgID: "pay-1" });
  const again = await js.publish("shop.orders.paid", "paid 1", { msgID: "pay-1" });
  if (first.duplicate || !again.duplicate) throw new Error("expected a duplicate ack");
  await jsm.consumers.add("ORDERS_JS", { durable_name: "billing", ack_policy: AckPolicy.Explicit, ack_wait: 30e9 });
  const c = await js.consumers.get("ORDERS_JS", "billing");
  // One pull for 3: +ACK, -NAK, +WPI then +ACK.
  const batch = [];
  for await (const m of await c.fetch({ max_messages: 3, expires: 2000 })) {
    batch.push(m);
    if (batch.length === 3) break;
  }
  batch[0].ack();
  batch[1].nak();
  batch[2].working();
  batch[2].ack();
  // The naked message comes again, with the next: +TERM and +ACK.
  const more = [];
  for await (const m of await c.fetch({ max_messages: 2, expires: 2000, idle_heartbeat: 500 })) {
    more.push(m);
    if (more.length === 2) break;
  }
  more[0].term("bad order");
  await more[1].ackAck();
  // A single message with next(): +ACK and pull together (+NXT).
  const one = await c.next({ expires: 2000 });
  if (one) await one.ackAck();
  // Nothing left: idle heartbeats, then 408 Request Timeout.
  const none = [];
  for await (const m of await c.fetch({ max_messages: 5, expires: 1200, idle_heartbeat: 500 })) none.push(m);
  if (none.length !== 0) throw new Error(`expected nothing, got ${none.length}`);
  await nc.flush();
  await jsm.streams.delete("ORDERS_JS");
  await nc.drain();
}

async function kvObjScenario() {
  const nc = await connect({ servers: SERVER, name: "natsjs-store" });
  const kv = await new Kvm(nc).create("profiles", { history: 5 });
  const rev = await kv.put("alice", "v1");
  await kv.update("alice", "v2", rev);
  try {
    await kv.update("alice", "v3", rev);  // stale revision: the server refuses it (10071)
    throw new Error("the stale update was accepted");
  } catch (err) {
    if (!String(err).includes("wrong last sequence")) throw err;
  }
  const got = await kv.get("alice");
  if (dec.decode(got.value) !== "v2") throw new Error("alice is not v2");
  const missing = await kv.get("bob");
  if (missing !== null) throw new Error("bob exists");
  await kv.put("bob", "b1");
  await kv.delete("bob");
  await kv.purge("alice");
  const os = await new Objm(nc).create("files");
  const body = enc.encode("line of the quarterly report\n".repeat(7));  // 203 bytes
  await os.putBlob({ name: "reports/q3 summary.txt", options: { max_chunk_size: 64 } }, body);
  const back = await os.getBlob("reports/q3 summary.txt");
  if (back === null || back.length !== body.length) throw new Error("object not read back");
  await os.delete("reports/q3 summary.txt");
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete("KV_profiles");
  await jsm.streams.delete("OBJ_files");
  await nc.drain();
}

async function servicesScenario() {
  const service = await connect({ servers: SERVER, name: "natsjs-calc" });
  const svc = await new Svcm(service).add({ name: "calc", version: "1.2.0", description: "arithmetic" });
  svc.addEndpoint("divide", (err, msg) => {
    const { a, b } = msg.json();
    if (b === 0) {
      msg.respondError(400, "division by zero");
    } else {
      msg.respond(JSON.stringify({ result: a / b }));
    }
  });
  await service.flush();
  const nc = await connect({ servers: SERVER, name: "natsjs-caller" });
  const ok = await nc.request("divide", JSON.stringify({ a: 6, b: 3 }), { timeout: 1000 });
  if (ok.json().result !== 2) throw new Error("6 / 3");
  const bad = await nc.request("divide", JSON.stringify({ a: 1, b: 0 }), { timeout: 1000 });
  if (bad.headers?.get("Nats-Service-Error") !== "division by zero") throw new Error("no service error");
  const client = new Svcm(nc).client({ maxWait: 300 });
  for (const ask of [client.ping("calc"), client.info("calc"), client.stats("calc")]) {
    let seen = 0;
    for await (const _ of await ask) seen++;
    if (seen !== 1) throw new Error(`${seen} services answered`);
  }
  await nc.drain();
  await svc.stop();
  await service.drain();
}

const which = process.argv[2];
const run = { cleanup, jetstream: jetstreamScenario, kv_obj: kvObjScenario, services: servicesScenario }[which];
if (!run) {
  console.error("usage: node client_natsjs.mjs cleanup|jetstream|kv_obj|services");
  process.exit(2);
}
await run();
