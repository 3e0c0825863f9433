// A real AI SDK client against agentloop's `/v1/chat/ui-stream`.
//
// Usage: AGENTLOOP_NPM_DIR=<dir holding node_modules/ai> node ui_stream.mjs <server url>
// The server must run a scripted model that (1) calls get_weather {"city": "Paris"}, (2) answers
// "It is 18 °C in Paris.", (3) answers "Tomorrow too." — see tests/ui_stream.rs.
// It sends messages the way `useChat` does (DefaultChatTransport), rebuilds the assistant
// message with the SDK's own reader (readUIMessageStream), and checks it. Exit code 0: passed.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

const url = process.argv[2];
const npmDir = process.env.AGENTLOOP_NPM_DIR;
if (!url || !npmDir) {
  console.error('usage: AGENTLOOP_NPM_DIR=<dir> node ui_stream.mjs <server url>');
  process.exit(2);
}
const require = createRequire(path.join(npmDir, 'package.json'));
const { DefaultChatTransport, readUIMessageStream } = require('ai');

const chatId = 'node-chat-1';
const transport = new DefaultChatTransport({ api: `${url}/v1/chat/ui-stream` });

async function send(messages) {
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
  let last;
  for await (const message of readUIMessageStream({
    stream,
    terminateOnError: true,
  })) {
    last = message;
  }
  return last;
}

// Only the fields a frontend renders; ids and provider metadata vary.
function view(message) {
  return {
    role: message.role,
    parts: message.parts.map((part) => {
      if (part.type === 'text') return { type: 'text', text: part.text, state: part.state };
      if (part.type.startsWith('tool-')) {
        return {
          type: part.type,
          toolCallId: part.toolCallId,
          state: part.state,
          input: part.input,
          output: part.output,
        };
      }
      return { type: part.type };
    }),
  };
}

const question = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'Weather in Paris?' }] };
const answer = await send([question]);
assert.ok(answer, 'the stream produced a message');
assert.match(answer.id, /^msg_[0-9a-f]{32}$/);
assert.deepEqual(view(answer), {
  role: 'assistant',
  parts: [
    { type: 'step-start' },
    {
      type: 'tool-get_weather',
      toolCallId: 'call_0_0',
      state: 'output-available',
      input: { city: 'Paris' },
      output: '18 °C in Paris',
    },
    { type: 'step-start' },
    { type: 'text', text: 'It is 18 °C in Paris.', state: 'done' },
  ],
});

// The chat goes on: the server knows the conversation and takes only the new prompt.
const followUp = { id: 'u2', role: 'user', parts: [{ type: 'text', text: 'And tomorrow?' }] };
const second = await send([question, answer, followUp]);
assert.deepEqual(view(second), {
  role: 'assistant',
  parts: [{ type: 'step-start' }, { type: 'text', text: 'Tomorrow too.', state: 'done' }],
});

// Nothing is running now: the resume request answers 204, which the SDK reports as null.
assert.equal(await transport.reconnectToStream({ chatId }), null);

console.log('ai sdk client: 3 checks passed');
