// agentloop chat page: talks to /v1/chat (fetch + a streaming SSE reader) and /v1/conversations.
'use strict';

const $ = (id) => document.getElementById(id);
const log = $('log');
const TOKEN_KEY = 'agentloop-token';

const state = {
  conversationId: null,
  messageId: null,
  lastEventId: null,
  busy: false,
  cards: new Map(),
};

// ---------- HTTP ----------

function authHeaders(extra = {}) {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: authHeaders(options.headers) });
  if (!response.ok) {
    let message = response.statusText;
    try {
      message = (await response.json()).error.message;
    } catch (_) { /* not JSON */ }
    if (response.status === 401) {
      message += ' — set the access token in the sidebar';
    }
    throw new Error(message);
  }
  return response;
}

// Server-Sent Events from a fetch response: yields {event, id, data}.
async function* readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) yield event;
    }
  }
}

function parseEvent(block) {
  let event = 'message';
  let id = null;
  const data = [];
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  return data.length ? { event, id, data: JSON.parse(data.join('\n')) } : null;
}

// ---------- Rendering ----------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function scrollDown() {
  log.scrollTop = log.scrollHeight;
}

function pretty(value) {
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

function contentText(content) {
  if (typeof content === 'string') return content;
  return content.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join('');
}

function showUser(text) {
  $('empty').hidden = true;
  const message = el('div', 'message user');
  message.append(el('div', 'bubble', text));
  log.append(message);
  scrollDown();
}

// One assistant answer: text bubbles, reasoning and tool cards in the order they stream.
class AssistantView {
  constructor() {
    $('empty').hidden = true;
    this.root = el('div', 'message assistant');
    this.bubble = null;
    this.thinkingBubble = null;
    log.append(this.root);
  }

  text(text) {
    this.thinkingBubble = null;
    if (!this.bubble) {
      this.bubble = el('div', 'bubble answer');
      this.root.append(this.bubble);
    }
    this.bubble.textContent += text;
    scrollDown();
  }

  thinking(text) {
    this.bubble = null;
    if (!this.thinkingBubble) {
      this.thinkingBubble = el('div', 'bubble thinking');
      this.root.append(this.thinkingBubble);
    }
    this.thinkingBubble.textContent += text;
    scrollDown();
  }

  toolStart(id, name, args) {
    this.bubble = null;
    this.thinkingBubble = null;
    const card = el('div', 'tool-card running');
    card.dataset.id = id;
    const head = el('div', 'tool-head');
    head.append(el('span', 'tool-name', name), el('span', 'tool-state', 'running'));
    const input = el('div', 'tool-section tool-arguments');
    input.append(el('div', 'tool-label', 'Arguments'), el('pre', '', pretty(args)));
    card.append(head, input);
    this.root.append(card);
    state.cards.set(id, card);
    scrollDown();
  }

  end(stopReason, usage) {
    const parts = [];
    if (usage) parts.push(`${usage.input_tokens} tokens in · ${usage.output_tokens} out`);
    if (stopReason && stopReason !== 'end_turn') parts.push(stopReason.replace(/_/g, ' '));
    if (parts.length) this.root.append(el('div', 'meta', parts.join(' · ')));
    scrollDown();
  }

  error(message) {
    this.root.append(el('div', 'alert', message));
    scrollDown();
  }
}

function showToolResult(id, content, isError) {
  const card = state.cards.get(id);
  if (!card) return;
  card.classList.remove('running');
  card.classList.add(isError ? 'error' : 'done');
  card.querySelector('.tool-state').textContent = isError ? 'error' : 'done';
  const result = el('div', 'tool-section tool-result');
  result.append(el('div', 'tool-label', isError ? 'Error' : 'Result'), el('pre', '', contentText(content)));
  card.append(result);
  scrollDown();
}

function setStatus(text) {
  $('status').textContent = text || '';
}

function setBusy(busy) {
  state.busy = busy;
  $('send').disabled = busy;
  $('stop').hidden = !busy;
  setStatus(busy ? 'Answering…' : '');
}

function clearLog() {
  state.cards.clear();
  for (const node of [...log.children]) {
    if (node.id !== 'empty') node.remove();
  }
  $('empty').hidden = false;
}

// ---------- Chat ----------

function handle(event, view) {
  const d = event.data;
  switch (event.event) {
    case 'message_start':
      if (state.conversationId !== d.conversation_id) {
        state.conversationId = d.conversation_id;
        refreshConversations();
      }
      state.messageId = d.message_id;
      break;
    case 'text_delta': view.text(d.text); break;
    case 'thinking_delta': view.thinking(d.text); break;
    case 'tool_call_start': view.toolStart(d.id, d.name, d.arguments); break;
    case 'tool_call_result': showToolResult(d.id, d.content, d.is_error); break;
    case 'message_end': view.end(d.stop_reason, d.usage); break;
    case 'error': view.error(d.message); break;
    default: break; // newer events of protocol 1
  }
}

// Read an answer to its end, reconnecting with Last-Event-ID if the connection drops.
async function follow(response, view) {
  state.lastEventId = null;
  for (let attempt = 0; ; attempt += 1) {
    let ended = false;
    try {
      for await (const event of readEvents(response)) {
        if (event.id !== null) state.lastEventId = event.id;
        if (event.event === 'message_end') ended = true;
        handle(event, view);
      }
      if (ended) return;
    } catch (error) {
      if (ended) return;
      if (attempt >= 3) throw error;
    }
    if (attempt >= 3 || !state.messageId) throw new Error('the connection was lost');
    setStatus('Reconnecting…');
    const headers = state.lastEventId === null ? {} : { 'Last-Event-ID': state.lastEventId };
    response = await api(`/v1/chat/${encodeURIComponent(state.messageId)}/events`, { headers });
    setStatus('Answering…');
  }
}

async function send(text) {
  setBusy(true);
  showUser(text);
  const view = new AssistantView();
  try {
    const body = { message: text };
    if (state.conversationId) body.conversation_id = state.conversationId;
    const response = await api('/v1/chat', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    state.messageId = response.headers.get('x-agentloop-message-id');
    await follow(response, view);
  } catch (error) {
    view.error(error.message);
  } finally {
    setBusy(false);
    refreshConversations();
  }
}

// ---------- Conversations ----------

async function refreshConversations() {
  const list = $('conversations');
  let conversations;
  try {
    conversations = (await (await api('/v1/conversations')).json()).conversations;
  } catch (error) {
    setStatus(error.message);
    return;
  }
  list.replaceChildren();
  if (!conversations.length) {
    list.append(el('li', 'none', 'No conversations yet'));
  }
  for (const c of conversations) {
    const item = el('li');
    const button = el('button', c.id === state.conversationId ? 'active' : '', c.title || 'Untitled');
    button.type = 'button';
    button.title = `${c.title}\n${new Date(c.updated_at).toLocaleString()}`;
    button.addEventListener('click', () => openConversation(c.id));
    item.append(button);
    list.append(item);
  }
  const current = conversations.find((c) => c.id === state.conversationId);
  $('title').textContent = current ? current.title : 'New chat';
}

function isPrompt(message) {
  return message.role === 'user' && !message.content.some((b) => b.type === 'tool_result');
}

function renderHistory(messages) {
  let view = null;
  for (const message of messages) {
    if (message.role === 'user') {
      for (const block of message.content) {
        if (block.type === 'tool_result') showToolResult(block.tool_use_id, block.content, !!block.is_error);
      }
      const text = message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      if (isPrompt(message)) {
        showUser(text);
        view = null;
      }
    } else if (message.role === 'assistant') {
      if (!view) view = new AssistantView();
      for (const block of message.content) {
        if (block.type === 'text') view.text(block.text);
        else if (block.type === 'thinking') view.thinking(block.thinking);
        else if (block.type === 'tool_use') view.toolStart(block.id, block.name, block.input);
      }
    }
  }
}

async function openConversation(id) {
  if (state.busy) return;
  $('sidebar').classList.remove('open');
  let conversation;
  try {
    conversation = await (await api(`/v1/conversations/${encodeURIComponent(id)}`)).json();
  } catch (error) {
    setStatus(error.message);
    return;
  }
  state.conversationId = conversation.id;
  clearLog();
  const running = conversation.active_message_id;
  let messages = conversation.messages;
  if (running) {
    // The running answer is replayed from its start, so show the history up to its prompt.
    const last = messages.map(isPrompt).lastIndexOf(true);
    messages = messages.slice(0, last + 1);
  }
  renderHistory(messages);
  refreshConversations();
  if (running) {
    setBusy(true);
    state.messageId = running;
    const view = new AssistantView();
    try {
      await follow(await api(`/v1/chat/${encodeURIComponent(running)}/events`), view);
    } catch (error) {
      view.error(error.message);
    } finally {
      setBusy(false);
    }
  }
}

function newChat() {
  if (state.busy) return;
  state.conversationId = null;
  state.messageId = null;
  clearLog();
  $('sidebar').classList.remove('open');
  refreshConversations();
  $('input').focus();
}

// ---------- Wiring ----------

function autoGrow() {
  const input = $('input');
  input.style.height = 'auto';
  const border = input.offsetHeight - input.clientHeight;
  input.style.height = `${input.scrollHeight + border}px`;
  input.style.overflowY = input.scrollHeight > input.clientHeight ? 'auto' : 'hidden';
}

$('composer').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $('input');
  const text = input.value.trim();
  if (!text || state.busy) return;
  input.value = '';
  autoGrow();
  send(text);
});

$('input').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $('composer').requestSubmit();
  }
});
$('input').addEventListener('input', autoGrow);

$('stop').addEventListener('click', () => {
  if (state.messageId) {
    api(`/v1/chat/${encodeURIComponent(state.messageId)}/cancel`, { method: 'POST' }).catch((e) => setStatus(e.message));
  }
});

$('new-chat').addEventListener('click', newChat);
$('toggle-sidebar').addEventListener('click', () => $('sidebar').classList.toggle('open'));

const tokenInput = $('token');
tokenInput.value = localStorage.getItem(TOKEN_KEY) || '';
tokenInput.addEventListener('change', () => {
  const token = tokenInput.value.trim();
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
  refreshConversations();
});

refreshConversations();
