// The unmodified @azure/service-bus SDK against a ray_broker namespace's AMQP front end.
//
// Usage: node sdk_round_trip.js <connection string> <queue> <session queue>
//
// On `queue` (empty, max delivery count > 2): sends one message with properties, a batch and a
// list; receives them in peek-lock and completes them, except one it abandons (and receives
// again) and one it dead-letters (and reads from the dead-letter queue without settling it);
// schedules two messages, cancels one and receives the other; peeks; receives with `subscribe`
// (auto-complete) and in receive-and-delete mode (data, value and sequence bodies); renews a
// lock, defers a message and receives it by sequence number; tries a message over the tier's size limit. On
// `session queue` (empty, requires sessions): sends to two sessions, accepts one by id and the
// next available one, sets and reads session state. Prints one JSON object (what the SDK saw) on stdout; exits 1 on any error.
"use strict";

const { ServiceBusClient } = require("@azure/service-bus");

const WAIT_MS = 3000;
const DEADLINE_MS = 20000;

/** Exactly `count` messages from `receiver`, in as many receive calls as it takes. */
async function receiveExactly(receiver, count) {
  const got = [];
  const deadline = Date.now() + DEADLINE_MS;
  while (got.length < count && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(count - got.length, { maxWaitTimeInMs: WAIT_MS });
    got.push(...batch);
  }
  if (got.length !== count) {
    throw new Error(`only ${got.length} of ${count} messages arrived`);
  }
  return got;
}

/** The fields of a received message the Python side checks, in JSON-friendly form. */
function describe(message) {
  return {
    body: message.body,
    messageId: message.messageId ?? null,
    correlationId: message.correlationId ?? null,
    contentType: message.contentType ?? null,
    subject: message.subject ?? null,
    to: message.to ?? null,
    replyTo: message.replyTo ?? null,
    sessionId: message.sessionId ?? null,
    partitionKey: message.partitionKey ?? null,
    timeToLive: message.timeToLive ?? null,
    applicationProperties: message.applicationProperties ?? {},
    deliveryCount: message.deliveryCount ?? null,
    sequenceNumber: message.sequenceNumber === undefined ? null : message.sequenceNumber.toString(),
    enqueuedTimeUtc: message.enqueuedTimeUtc ? message.enqueuedTimeUtc.getTime() : null,
    lockedUntilUtc: message.lockedUntilUtc ? message.lockedUntilUtc.getTime() : null,
    hasLockToken: typeof message.lockToken === "string" && message.lockToken.length === 36,
    deadLetterReason: message.deadLetterReason ?? null,
    deadLetterErrorDescription: message.deadLetterErrorDescription ?? null,
  };
}

async function sendAll(client, queue) {
  const sender = client.createSender(queue);
  await sender.sendMessages({
    body: "first",
    messageId: "m-1",
    correlationId: "c-1",
    contentType: "text/plain",
    subject: "greeting",
    to: "someone",
    replyTo: "back",
    partitionKey: "key-1",
    timeToLive: 420000,
    applicationProperties: { n: 7, s: "text", f: 1.5, b: true },
  });
  const batch = await sender.createMessageBatch();
  for (let i = 0; i < 3; i++) {
    if (!batch.tryAddMessage({ body: `batched ${i}`, messageId: `b-${i}` })) {
      throw new Error(`batched message ${i} did not fit a batch of ${batch.maxSizeInBytes} bytes`);
    }
  }
  await sender.sendMessages(batch);
  await sender.sendMessages([
    { body: "abandon me", messageId: "l-abandon" },
    { body: { kind: "json", n: 1 }, messageId: "l-dead" },
  ]);
  const report = { batchMaxSizeInBytes: batch.maxSizeInBytes, batchCount: batch.count };
  await sender.close();
  return report;
}

async function settleAll(client, queue) {
  const receiver = client.createReceiver(queue, { receiveMode: "peekLock" });
  const received = await receiveExactly(receiver, 6);
  let abandoned = null;
  for (const message of received) {
    if (message.messageId === "l-abandon") {
      abandoned = message;
      await receiver.abandonMessage(message);
    } else if (message.messageId === "l-dead") {
      await receiver.deadLetterMessage(message, {
        deadLetterReason: "bad-format",
        deadLetterErrorDescription: "not what was expected",
      });
    } else {
      await receiver.completeMessage(message);
    }
  }
  const [again] = await receiveExactly(receiver, 1);
  await receiver.completeMessage(again);
  await receiver.close();
  const deadLetters = client.createReceiver(queue, { receiveMode: "peekLock", subQueueType: "deadLetter" });
  const [dead] = await receiveExactly(deadLetters, 1);
  await deadLetters.close(); // unsettled: it stays on the dead-letter queue
  return {
    received: received.map(describe),
    abandoned: describe(abandoned),
    again: describe(again),
    deadLettered: describe(dead),
  };
}

async function schedule(client, queue) {
  const sender = client.createSender(queue);
  const soon = new Date(Date.now() + 2500);
  const [kept] = await sender.scheduleMessages({ body: "scheduled", messageId: "s-kept" }, soon);
  const [cancelled] = await sender.scheduleMessages({ body: "cancelled", messageId: "s-cancelled" },
    new Date(Date.now() + 3600000));
  await sender.cancelScheduledMessages(cancelled);
  await sender.close();
  const receiver = client.createReceiver(queue, { receiveMode: "peekLock" });
  const peeked = await receiver.peekMessages(10);
  const [arrived] = await receiveExactly(receiver, 1);
  const receivedAt = Date.now();
  await receiver.completeMessage(arrived);
  await receiver.close();
  return {
    scheduledFor: soon.getTime(),
    keptSequenceNumber: kept.toString(),
    cancelledSequenceNumber: cancelled.toString(),
    peekedBeforeDue: peeked.map((m) => ({ messageId: m.messageId, state: m.state })),
    arrived: describe(arrived),
    receivedAt,
  };
}

async function streamAndDelete(client, queue) {
  const sender = client.createSender(queue);
  await sender.sendMessages([0, 1, 2].map((i) => ({ body: `streamed ${i}` })));
  let tooLarge = null;
  try {
    await sender.sendMessages({ body: "x".repeat(300 * 1024) });
  } catch (error) {
    tooLarge = { code: error.code ?? null, name: error.name ?? null };
  }
  const streamer = client.createReceiver(queue, { receiveMode: "peekLock" });
  const streamed = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`subscribe got ${streamed.length} of 3 messages`)), DEADLINE_MS);
    streamer.subscribe({
      processMessage: async (message) => {
        streamed.push(message.body);
        if (streamed.length === 3) {
          clearTimeout(timer);
          resolve();
        }
      },
      processError: async (args) => {
        clearTimeout(timer);
        reject(args.error);
      },
    }, { autoCompleteMessages: true });
  });
  await streamer.close();
  await sender.sendMessages([
    { body: "deleted 0" },
    { body: { kind: "value", list: [1, "two"] }, bodyType: "value" },
    { body: [[1, 2], ["three"]], bodyType: "sequence" },
  ]);
  await sender.close();
  const deleter = client.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  const deleted = await receiveExactly(deleter, 3);
  await deleter.close();
  return {
    streamed: streamed.sort(),
    tooLarge,
    deleted: deleted.map((m) => ({
      body: m.body,
      bodyType: m._rawAmqpMessage.bodyType,
      hasLockToken: m.lockToken !== undefined,
    })),
  };
}

async function deferAndRenew(client, queue) {
  const sender = client.createSender(queue);
  await sender.sendMessages({ body: "defer me", messageId: "d-1" });
  await sender.close();
  const receiver = client.createReceiver(queue, { receiveMode: "peekLock" });
  const [message] = await receiveExactly(receiver, 1);
  const lockedUntil = message.lockedUntilUtc.getTime();
  await new Promise((resolve) => setTimeout(resolve, 50));
  const renewedUntil = (await receiver.renewMessageLock(message)).getTime();
  await receiver.deferMessage(message);
  const [deferred] = await receiver.receiveDeferredMessages(message.sequenceNumber);
  await receiver.completeMessage(deferred);
  await receiver.close();
  return { lockedUntil, renewedUntil, deferred: describe(deferred), deferredState: deferred.state };
}

async function sessions(client, queue) {
  const sender = client.createSender(queue);
  await sender.sendMessages([
    { body: "s1-a", sessionId: "s-1" },
    { body: "s1-b", sessionId: "s-1" },
    { body: "s2-a", sessionId: "s-2" },
  ]);
  await sender.close();
  const byId = await client.acceptSession(queue, "s-1");
  const first = await receiveExactly(byId, 2);
  for (const message of first) {
    await byId.completeMessage(message);
  }
  await byId.setSessionState("state of s-1");
  const state = (await byId.getSessionState()).toString();
  await byId.close();
  const next = await client.acceptNextSession(queue);
  const second = await receiveExactly(next, 1);
  await next.completeMessage(second[0]);
  const nextSessionId = next.sessionId;
  const lockedUntil = next.sessionLockedUntilUtc ? next.sessionLockedUntilUtc.getTime() : null;
  await next.close();
  return {
    byId: first.map(describe),
    state,
    nextSessionId,
    nextLockedUntilUtc: lockedUntil,
    next: second.map(describe),
  };
}

async function main() {
  const [connectionString, queue, sessionQueue] = process.argv.slice(2);
  if (!sessionQueue) {
    throw new Error("usage: node sdk_round_trip.js <connection string> <queue> <session queue>");
  }
  const started = Date.now();
  const client = new ServiceBusClient(connectionString);
  try {
    const report = {
      sent: await sendAll(client, queue),
      settled: await settleAll(client, queue),
      scheduled: await schedule(client, queue),
      streamed: await streamAndDelete(client, queue),
      deferred: await deferAndRenew(client, queue),
      sessions: await sessions(client, sessionQueue),
    };
    report.elapsedMs = Date.now() - started;
    process.stdout.write(JSON.stringify(report) + "\n");
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
