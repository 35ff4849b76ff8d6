#!/usr/bin/env node
'use strict';
// ali-ons (npm) producer and push consumer against the stand-in on 127.0.0.1:9876.
//
//   node client_alions.js [--mode both|produce] [--topic TopicTest] [--count 6]
//                         [--timeout-ms 20000] [--expect-fail]
//
// Modes:
//   both     a push consumer (group GID_streamdump) subscribes first; once its pulls
//            are waiting at the broker, a producer (group PID_streamdump) sends
//            --count messages with tags and keys; the script waits until the consumer
//            got them all, then closes consumer and producers (UPDATE_CONSUMER_OFFSET,
//            UNREGISTER_CLIENT) and exits 0.
//   produce  only the producer sends; with --expect-fail every send is expected to be
//            refused (exit 0 if all failed, 1 if one got through).
//
// It is told where ali-ons is with ALIONS_DIR (default: ./node_modules/ali-ons, then
// /tmp/rmq-clients/node_modules/ali-ons). Exits after --timeout-ms at the latest.

const path = require('path');
const fs = require('fs');

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  if (i < 0) return dflt;
  const v = process.argv[i + 1];
  return v === undefined || v.startsWith('--') ? true : v;
}

function loadAliOns() {
  const candidates = [
    process.env.ALIONS_DIR,
    path.join(__dirname, 'node_modules', 'ali-ons'),
    '/tmp/rmq-clients/node_modules/ali-ons',
  ].filter(Boolean);
  for (const dir of candidates) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return require(dir);
  }
  throw new Error('ali-ons not found; npm install it (see README.md) or set ALIONS_DIR');
}

const { Producer, Consumer, Message } = loadAliOns();

const mode = arg('mode', 'both');
const topic = arg('topic', 'TopicTest');
const count = Number(arg('count', 6));
const timeoutMs = Number(arg('timeout-ms', 20000));
const expectFail = !!arg('expect-fail', false);

const common = {
  nameSrv: '127.0.0.1:9876',       // fixed name server: no HTTP lookup (onsAddr) happens
  clientIP: '127.0.0.1',           // goes into clientID / heartbeat only
  // ali-ons asserts an httpclient is given even when nameSrv makes it unused
  httpclient: { request: async () => { throw new Error('no HTTP name-server lookup here'); } },
  // keep the periodic tasks out of a short run
  pollNameServerInteval: 60000,
  heartbeatBrokerInterval: 60000,
  persistConsumerOffsetInterval: 60000,
  rebalanceInterval: 60000,
};

const sleep = ms => new Promise(r => setTimeout(r, ms));
const log = (...a) => console.log('[client_alions]', ...a);

const hardStop = setTimeout(() => {
  log(`timeout after ${timeoutMs} ms`);
  process.exit(2);
}, timeoutMs);

async function produce(producer) {
  let ok = 0, failed = 0;
  for (let i = 0; i < count; i++) {
    const tag = i % 2 === 0 ? 'TagA' : 'TagB';
    const msg = new Message(topic, tag, `hello streamdump ${i} from ali-ons`);
    msg.keys = [ `key-${i}`, `order-${1000 + i}` ];
    msg.properties.origin = 'ali-ons';
    try {
      const res = await producer.send(msg);
      ok++;
      log(`sent #${i} ${res.sendStatus} msgId=${res.msgId} queue=${res.messageQueue.queueId} offset=${res.queueOffset}`);
    } catch (err) {
      failed++;
      log(`send #${i} failed: ${err.name} code=${err.code} ${err.message}`);
      if (expectFail) break;  // one refused send (with its retries) is enough
    }
  }
  return { ok, failed };
}

async function main() {
  let consumer = null;
  const received = [];
  let allReceived;
  const gotAll = new Promise(r => { allReceived = r; });

  if (mode === 'both') {
    consumer = new Consumer(Object.assign({}, common, {
      consumerGroup: 'GID_streamdump',
      instanceName: 'consumer',
      pullBatchSize: 32,
    }));
    consumer.on('error', err => log('consumer error:', err.name, err.code, err.message));
    consumer.subscribe(topic, '*', async msg => {
      received.push(msg);
      log(`received ${msg.msgId} queue=${msg.queueId} offset=${msg.queueOffset} tags=${msg.tags} keys=${msg.keys} body=${msg.body}`);
      if (received.length >= count) allReceived();
    });
    await consumer.ready();
    // let the rebalance run and the first pulls reach the broker (they are held there)
    await sleep(1500);
  }

  const producer = new Producer(Object.assign({}, common, {
    producerGroup: 'PID_streamdump',
    instanceName: 'producer',
    sendMsgTimeout: 3000,
  }));
  producer.on('error', err => log('producer error:', err.name, err.code, err.message));
  await producer.ready();
  const { ok, failed } = await produce(producer);

  let status = 0;
  if (mode === 'both') {
    await Promise.race([ gotAll, sleep(timeoutMs - 4000) ]);
    log(`consumer got ${received.length}/${count}`);
    if (received.length < count) status = 1;
    await sleep(300);
    await consumer.close();
  } else if (expectFail) {
    status = ok === 0 && failed > 0 ? 0 : 1;
  } else {
    status = failed === 0 ? 0 : 1;
  }
  await producer.close();
  // the inner CLIENT_INNER_PRODUCER that ali-ons creates for consumers and producers
  if (Producer.defaultProducer) await Producer.defaultProducer.close();
  await sleep(200);
  clearTimeout(hardStop);
  log(`done, exit ${status}`);
  process.exit(status);
}

main().catch(err => {
  log('fatal:', err && err.stack || err);
  process.exit(1);
});
