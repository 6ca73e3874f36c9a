// kafkajs as a client of kohort broker, driven by tests/interop/test_kafkajs_on_kohort.py. One JSON object per
// line on stdout; stops cleanly on the line "stop" on stdin (or at --seconds).
//   node peer.js produce BOOTSTRAP TOPIC COUNT            -> {"event":"done","acked":N}
//   node peer.js consume BOOTSTRAP TOPIC GROUP SECONDS    -> assigned / records {offsets:["p@o",...]} / closed
const { Kafka, logLevel, CompressionTypes } = require('kafkajs');

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const [mode, bootstrap, topic, ...rest] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kohort-kafkajs', brokers: bootstrap.split(','), logLevel: logLevel.ERROR,
                          retry: { retries: 10 } });

async function produce(count) {
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await p.connect();
  let acked = 0;
  for (let i = 0; i < count; i += 500) {
    const messages = [];
    for (let j = i; j < Math.min(count, i + 500); j++) messages.push({ key: `k${j % 7}`, value: `js-${j}` });
    const res = await p.send({ topic, acks: -1, messages, compression: CompressionTypes.GZIP });
    acked += messages.length;
  }
  await p.disconnect();
  out({ event: 'done', acked });
}

async function consume(group, seconds) {
  const c = kafka.consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 500,
                             rebalanceTimeout: 10000 });
  c.on(c.events.GROUP_JOIN, (e) => out({ event: 'assigned', assignment: e.payload.memberAssignment }));
  await c.connect();
  await c.subscribe({ topic, fromBeginning: true });
  await c.run({
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      const offsets = batch.messages.map((m) => `${batch.partition}@${m.offset}`);
      out({ event: 'records', offsets });
      for (const m of batch.messages) resolveOffset(m.offset);
      await heartbeat();
    },
  });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await c.disconnect();
    out({ event: 'closed' });
    process.exit(0);
  };
  process.stdin.on('data', (d) => { if (d.toString().includes('stop')) stop(); });
  setTimeout(stop, seconds * 1000);
}

(async () => {
  try {
    if (mode === 'produce') await produce(parseInt(rest[0], 10));
    else if (mode === 'consume') await consume(rest[0], parseFloat(rest[1] || '60'));
    else throw new Error(`unknown mode ${mode}`);
  } catch (e) {
    out({ event: 'fatal', error: String(e) });
    process.exit(2);
  }
})();
