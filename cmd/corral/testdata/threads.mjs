// Drives a multi-agent session's threads with the official TypeScript SDK (@anthropic-ai/sdk), for
// TestTSSDKThreads (ts_sdk_e2e_test.go). Environment: CORRAL_TS_SDK (the npm prefix the SDK is installed
// under), CORRAL_URL, CORRAL_KEY, SESSION_ID. It lists the session's threads until the child has started, streams
// the child's events (replayed from its start with Last-Event-ID 0, then live) until the child idles, lists the
// threads again by status and the child's events, and prints one JSON line: what the Go test asserts on. While
// it streams, it prints {"streaming": ...} first: the test releases the child's held model call then.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sdk = join(process.env.CORRAL_TS_SDK, 'node_modules', '@anthropic-ai', 'sdk');
const { default: Anthropic } = await import(pathToFileURL(join(sdk, 'index.mjs')).href);
const { VERSION } = await import(pathToFileURL(join(sdk, 'version.mjs')).href);

const client = new Anthropic({ apiKey: process.env.CORRAL_KEY, baseURL: process.env.CORRAL_URL, maxRetries: 0 });
const sessionID = process.env.SESSION_ID;
const deadline = Date.now() + 120_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function listThreads(params = {}) {
  const threads = [];
  for await (const th of client.beta.sessions.threads.list(sessionID, params)) {
    threads.push(th);
  }
  return threads;
}

// The threads, once the coordinator has started its child.
let running;
for (;;) {
  running = await listThreads();
  if (running.length === 2) break;
  if (Date.now() > deadline) throw new Error(`no child thread: ${JSON.stringify(running)}`);
  await sleep(100);
}
const primary = running.find((th) => th.parent_thread_id === null);
const child = running.find((th) => th.parent_thread_id !== null);
const one = await client.beta.sessions.threads.retrieve(child.id, { session_id: sessionID });

// The child's stream, from its start, until it idles.
const stream = await client.beta.sessions.threads.events.stream(
  child.id,
  { session_id: sessionID },
  { headers: { 'Last-Event-ID': '0' } },
);
console.log(JSON.stringify({ streaming: child.id }));
const streamed = [];
for await (const ev of stream) {
  streamed.push(ev);
  if (ev.type === 'session.thread_status_idle') break;
}

// Whether the coordinator has answered the child's report: a status_idle of its thread after the report's receipt.
// Until then both threads can be idle for a moment: the child done, the coordinator not yet woken by its report.
async function coordinatorAnswered() {
  const types = [];
  for await (const ev of client.beta.sessions.threads.events.list(primary.id, { session_id: sessionID })) {
    types.push(ev.type);
  }
  const received = types.lastIndexOf('agent.thread_message_received');
  return received >= 0 && types.slice(received).some((type) => type.endsWith('status_idle'));
}

// Every thread idle (the coordinator has the child's report and has answered it), listed by status.
let idle;
for (;;) {
  idle = await listThreads({ statuses: ['idle'] });
  if (idle.length === 2 && (await coordinatorAnswered())) break;
  if (Date.now() > deadline) throw new Error(`threads not idle: ${JSON.stringify(await listThreads())}`);
  await sleep(100);
}
const stillRunning = await listThreads({ statuses: ['running', 'rescheduling'] });
const listed = [];
for await (const ev of client.beta.sessions.threads.events.list(child.id, { session_id: sessionID })) {
  listed.push(ev);
}
const primaryEvents = [];
for await (const ev of client.beta.sessions.threads.events.list(primary.id, { session_id: sessionID })) {
  primaryEvents.push(ev);
}

console.log(JSON.stringify({
  version: VERSION,
  running: running.map(({ id, parent_thread_id, status, agent }) => ({ id, parent_thread_id, status, agent_name: agent.name, agent_type: agent.type })),
  retrieved: { id: one.id, session_id: one.session_id, type: one.type },
  streamed,
  idle: idle.map(({ id, status, usage }) => ({ id, status, output_tokens: usage?.output_tokens ?? 0 })),
  still_running: stillRunning.length,
  listed,
  primary_events: primaryEvents.map((ev) => ev.type),
}));
