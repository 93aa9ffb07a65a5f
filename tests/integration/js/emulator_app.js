// An application written for Microsoft's Service Bus emulator, in the shape of its JavaScript
// samples, run unchanged against `ray-broker emulator`: it waits for /health on the management
// port, creates a queue with the administration client, sends, receives and completes a message
// with the emulator's published connection string, and deletes the queue.
//
// Usage: node emulator_app.js <connection string> <administration connection string> <management port> <queue>
//
// The administration client speaks HTTPS to the management port: the namespace's certificate is
// trusted through NODE_EXTRA_CA_CERTS. Prints one JSON object on stdout; exits 1 on any error.
"use strict";

const { ServiceBusAdministrationClient, ServiceBusClient } = require("@azure/service-bus");

const HEALTHY_WITHIN_MS = 60000;
const WAIT_MS = 5000;

/** Wait until GET /health on the management port answers 200 (as the emulator's samples do). */
async function waitForHealth(port) {
  const deadline = Date.now() + HEALTHY_WITHIN_MS;
  while (Date.now() < deadline) {
    try {
      const reply = await fetch(`http://localhost:${port}/health`);
      if (reply.status === 200) {
        return (await reply.json()).status;
      }
    } catch (error) {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`/health did not answer 200 within ${HEALTHY_WITHIN_MS} ms`);
}

async function main() {
  const [connectionString, adminConnectionString, managementPort, queue] = process.argv.slice(2);
  const health = await waitForHealth(managementPort);
  const admin = new ServiceBusAdministrationClient(adminConnectionString);
  await admin.createQueue(queue, { maxDeliveryCount: 3 });
  const created = await admin.getQueue(queue);
  const client = new ServiceBusClient(connectionString);
  try {
    const sender = client.createSender(queue);
    await sender.sendMessages({ body: "hello from JavaScript", messageId: "js-1",
                                applicationProperties: { origin: "emulator-sample" } });
    await sender.close();
    const receiver = client.createReceiver(queue);
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: WAIT_MS });
    if (message === undefined) {
      throw new Error("the message sent did not arrive");
    }
    await receiver.completeMessage(message);
    await receiver.close();
    const runtime = await admin.getQueueRuntimeProperties(queue);
    await admin.deleteQueue(queue);
    const left = await admin.queueExists(queue);
    console.log(JSON.stringify({
      health,
      maxDeliveryCount: created.maxDeliveryCount,
      received: { body: message.body, messageId: message.messageId,
                  applicationProperties: message.applicationProperties },
      activeAfterComplete: runtime.activeMessageCount,
      existsAfterDelete: left,
    }));
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
