// The load generator both servers face: `concurrency` workers, each sending chats one after
// another until `chats` have been sent, every chat one POST of a new conversation's first
// message (the body `useChat` sends), its UI message stream read to the end.
//
// Usage: node load.mjs <url> <concurrency> <chats>
// Prints one JSON line: chats, failures, and time to first byte in ms (p50, p99).

import http from 'node:http';

const [url, concurrency, chats] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });

function chat(n) {
  const body = JSON.stringify({
    id: `bench-${process.pid}-${n}`,
    messages: [
      { id: `u-${n}`, role: 'user', parts: [{ type: 'text', text: "What's the weather in Paris?" }] },
    ],
    trigger: 'submit-message',
  });
  return new Promise((resolve) => {
    const started = process.hrtime.bigint();
    let ttfb = null;
    let text = '';
    const req = http.request(
      target,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          if (ttfb === null) ttfb = Number(process.hrtime.bigint() - started) / 1e6;
          text += chunk;
        });
        res.on('end', () => {
          // A whole chat ran the tool and finished the answer.
          const ok =
            res.statusCode === 200 && text.includes('tool-output-available') && text.includes('"type":"finish"');
          resolve({ ok, ttfb, status: res.statusCode, tail: ok ? '' : text.slice(-300) });
        });
        res.on('error', () => resolve({ ok: false, ttfb, status: res.statusCode, tail: 'response error' }));
      },
    );
    req.on('error', (e) => resolve({ ok: false, ttfb, status: 0, tail: String(e) }));
    req.end(body);
  });
}

let next = 0;
const ttfbs = [];
let failures = 0;
let firstFailure = null;
async function worker() {
  while (next < chats) {
    const n = next++;
    const r = await chat(n);
    if (r.ok) ttfbs.push(r.ttfb);
    else {
      failures++;
      firstFailure ??= r;
    }
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
ttfbs.sort((a, b) => a - b);
const pct = (p) => (ttfbs.length ? ttfbs[Math.min(ttfbs.length - 1, Math.floor((p / 100) * ttfbs.length))] : null);
console.log(JSON.stringify({ chats, failures, ttfb_p50_ms: pct(50), ttfb_p99_ms: pct(99), first_failure: firstFailure }));
agent.destroy();
