// A real AI SDK chat (the `AbstractChat` that `useChat` wraps) approving and denying tool
// calls against agentloop's `/v1/chat/ui-stream`.
//
// Usage: AGENTLOOP_NPM_DIR=<dir holding node_modules/ai> node approvals.mjs <server url>
// The server must run a scripted model that (1) calls deploy {"env": "prod"} (id call_1),
// (2) answers "Done.", (3) calls deploy {"env": "prod"} (id call_2), (4) answers "Done." — with
// `deploy` needing approval; see tests/approvals.rs. The first call is approved, the second
// denied, each with `addToolApprovalResponse` and `sendAutomaticallyWhen:
// lastAssistantMessageIsCompleteWithApprovalResponses`, as the AI SDK's docs show for
// `useChat`. The protocol has no edited arguments (an approval response is `{id, approved,
// reason?}` in `ai` 6 and 7), so edits are only tested over `/v1/chat`. Exit code 0: passed.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

const url = process.argv[2];
const npmDir = process.env.AGENTLOOP_NPM_DIR;
if (!url || !npmDir) {
  console.error('usage: AGENTLOOP_NPM_DIR=<dir> node approvals.mjs <server url>');
  process.exit(2);
}
const require = createRequire(path.join(npmDir, 'package.json'));
const {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} = require('ai');

// The plain state `useChat` keeps in React, without React.
class State {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

let finished = [];
const chat = new AbstractChat({
  id: 'node-approvals',
  state: new State(),
  transport: new DefaultChatTransport({ api: `${url}/v1/chat/ui-stream` }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onFinish: ({ message }) => finished.push(message),
  onError: (error) => {
    console.error('chat error:', error);
    process.exit(1);
  },
});

// Resolves once `n` responses have finished.
async function responses(n) {
  for (let i = 0; i < 2000 && finished.length < n; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.equal(finished.length, n, `${n} responses finished`);
  while (chat.status !== 'ready') await new Promise((resolve) => setTimeout(resolve, 10));
}

// Only what a frontend renders.
function view(message) {
  return message.parts
    .filter((part) => part.type !== 'step-start')
    .map((part) => {
      if (part.type === 'text') return { type: 'text', text: part.text };
      return {
        type: part.type,
        toolCallId: part.toolCallId,
        state: part.state,
        input: part.input,
        output: part.output,
        approval: part.approval,
      };
    });
}

const deploy = (id, state, extra) => ({
  type: 'tool-deploy',
  toolCallId: id,
  state,
  input: { env: 'prod' },
  output: undefined,
  approval: undefined,
  ...extra,
});

// 1. Approve.
await chat.sendMessage({ text: 'Deploy it' });
await responses(1);
let last = chat.lastMessage;
assert.equal(last.role, 'assistant');
assert.deepEqual(view(last), [deploy('call_1', 'approval-requested', { approval: { id: 'call_1' } })]);
await chat.addToolApprovalResponse({ id: 'call_1', approved: true });
await responses(2);
last = chat.lastMessage;
assert.equal(chat.messages.length, 2, 'the answer continued the same assistant message');
assert.deepEqual(view(last), [
  deploy('call_1', 'output-available', {
    output: 'deployed to prod',
    approval: { id: 'call_1', approved: true, reason: undefined },
  }),
  { type: 'text', text: 'Done.' },
]);

// 2. Deny, with a reason the model reads.
await chat.sendMessage({ text: 'Deploy it again' });
await responses(3);
last = chat.lastMessage;
assert.deepEqual(view(last), [deploy('call_2', 'approval-requested', { approval: { id: 'call_2' } })]);
await chat.addToolApprovalResponse({ id: 'call_2', approved: false, reason: 'not on a Friday' });
await responses(4);
last = chat.lastMessage;
assert.equal(chat.messages.length, 4);
assert.deepEqual(view(last), [
  deploy('call_2', 'output-denied', {
    approval: { id: 'call_2', approved: false, reason: 'not on a Friday' },
  }),
  { type: 'text', text: 'Done.' },
]);

console.log('ai sdk approvals: 2 checks passed');
