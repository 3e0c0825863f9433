// agentloop chat page: talks to /v1/chat (fetch + a streaming SSE reader) and /v1/conversations.
// Answers are Markdown rendered by the vendored `marked`, sanitized by `DOMPurify`, code
// highlighted by `highlight.js` (static/vendor/, see scripts/vendor-page.sh).
'use strict';

const $ = (id) => document.getElementById(id);
const log = $('log');
const TOKEN_KEY = 'agentloop-token';

const state = {
  conversationId: null,
  messageId: null,
  lastEventId: null,
  busy: false,
  // Which chat the page shows: an answer streaming into a chat the user left keeps reading
  // (so the server keeps running it) but no longer touches the page.
  session: 0,
  // Whether new content scrolls the log: only while the user is at its bottom.
  stick: true,
  cards: new Map(),
  titles: new Map(),
};

// ---------- HTTP ----------

function authHeaders(extra = {}) {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
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
    throw new HttpError(response.status, message);
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

// ---------- Markdown ----------

// Links in answers open in a new tab and tell the target nothing about the page.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});
hljs.configure({ ignoreUnescapedHTML: true });

// Model output is untrusted: parsed as Markdown, then everything that could run (scripts,
// event handlers, javascript: URLs) is removed before it reaches the page.
function renderMarkdown(target, text) {
  const html = marked.parse(text, { gfm: true, breaks: true });
  target.innerHTML = DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });
  for (const code of target.querySelectorAll('pre > code')) {
    const known = [...code.classList].some((c) => c.startsWith('language-') && hljs.getLanguage(c.slice(9)));
    if (known || code.textContent.length < 20000) hljs.highlightElement(code);
    addCopyButton(code.parentElement);
  }
}

function addCopyButton(pre) {
  const wrapper = el('div', 'code-block');
  pre.replaceWith(wrapper);
  const button = el('button', 'copy', 'Copy');
  button.type = 'button';
  button.setAttribute('aria-label', 'Copy code');
  button.addEventListener('click', async () => {
    const text = pre.querySelector('code').textContent;
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch (_) {
      button.textContent = 'Press Ctrl+C';
      const range = document.createRange();
      range.selectNodeContents(pre);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  });
  wrapper.append(button, pre);
}

// ---------- Rendering ----------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function atBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 40;
}

// Follows new content only while the user is at the bottom: reading further up is not
// interrupted by a streaming answer.
function scrollDown(force = false) {
  if (force) state.stick = true;
  if (state.stick) {
    log.scrollTop = log.scrollHeight;
  } else {
    $('jump').hidden = false;
  }
}

function pretty(value) {
  if (typeof value === 'string') {
    try {
      const parsed = JSON.parse(value);
      if (parsed !== null && typeof parsed === 'object') return JSON.stringify(parsed, null, 2);
    } catch (_) { /* plain text */ }
    return value;
  }
  return JSON.stringify(value, null, 2);
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

function usageText(usage, cost) {
  if (!usage) return '';
  const tokens = `${usage.input_tokens} tokens in · ${usage.output_tokens} out`;
  // Decimal strings in USD, shown as stored; no cost means the model has no price.
  return cost ? `${tokens} · $${cost.total}` : tokens;
}

// A tool call as a card: its name and state on a button that folds the arguments and the
// result away; a call waiting for approval gets an ApprovalCard inside it.
class ToolCard {
  constructor(id, name, args) {
    this.root = el('div', 'tool-card running');
    this.root.dataset.id = id;
    const bodyId = `tool-${id.replace(/[^A-Za-z0-9_-]/g, '_')}-${Math.random().toString(36).slice(2, 8)}`;
    this.toggle = el('button', 'tool-head');
    this.toggle.type = 'button';
    this.toggle.setAttribute('aria-expanded', 'false');
    this.toggle.setAttribute('aria-controls', bodyId);
    this.state = el('span', 'tool-state', 'running');
    this.toggle.append(el('span', 'chevron', '▸'), el('span', 'tool-name', name), this.state);
    this.body = el('div', 'tool-body');
    this.body.id = bodyId;
    this.body.hidden = true;
    const input = el('div', 'tool-section tool-arguments');
    input.append(el('div', 'tool-label', 'Arguments'), el('pre', '', pretty(args)));
    this.body.append(input);
    this.toggle.addEventListener('click', () => this.setExpanded(this.body.hidden));
    this.root.append(this.toggle, this.body);
  }

  setExpanded(expanded) {
    this.body.hidden = !expanded;
    this.toggle.setAttribute('aria-expanded', String(expanded));
  }

  result(content, isError) {
    this.root.classList.remove('running');
    this.root.classList.add(isError ? 'error' : 'done');
    this.state.textContent = isError ? 'error' : 'done';
    const result = el('div', 'tool-section tool-result');
    result.append(el('div', 'tool-label', isError ? 'Error' : 'Result'), el('pre', '', pretty(contentText(content))));
    this.body.append(result);
  }
}

// The question a call needing approval asks: why, the arguments, and Approve / Edit / Deny
// (plain buttons, so the keyboard works; the focus goes to Approve when it appears). Edit opens
// the arguments as JSON to change; Deny asks what to tell the model. `decide(decision)` is
// called with the call's decision in the server's format.
class ApprovalCard {
  constructor(name, args, reason, decide) {
    this.decide = decide;
    this.args = args;
    this.root = el('div', 'approval');
    this.root.setAttribute('role', 'group');
    this.root.setAttribute('aria-label', `${name} needs your approval`);
    this.root.append(el('p', 'approval-reason', reason));
    this.argsView = el('pre', 'approval-arguments', pretty(args));
    this.editor = el('textarea', 'approval-editor');
    this.editor.hidden = true;
    this.editor.rows = 6;
    this.editor.setAttribute('aria-label', `Arguments for ${name} (JSON)`);
    this.why = el('input', 'approval-why');
    this.why.type = 'text';
    this.why.hidden = true;
    this.why.placeholder = 'Why not? (the model reads this)';
    this.why.setAttribute('aria-label', 'Why the call is denied (the model reads this)');
    this.why.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') { event.preventDefault(); this.deny(); }
    });
    this.error = el('p', 'approval-error');
    this.error.setAttribute('role', 'alert');
    const actions = el('div', 'approval-actions');
    this.approveButton = this.button('Approve', 'approve', () => this.send({ decision: 'approve' }, 'Approved'));
    this.editButton = this.button('Edit', 'edit', () => this.edit());
    this.denyButton = this.button('Deny', 'deny', () => this.deny());
    actions.append(this.approveButton, this.editButton, this.denyButton);
    this.root.append(this.argsView, this.editor, this.why, actions, this.error);
  }

  button(label, className, onClick) {
    const button = el('button', className, label);
    button.type = 'button';
    button.addEventListener('click', onClick);
    return button;
  }

  focus() {
    this.approveButton.focus();
  }

  edit() {
    if (this.editor.hidden) {
      this.editor.value = pretty(this.args);
      this.editor.hidden = false;
      this.argsView.hidden = true;
      this.editButton.textContent = 'Approve edited';
      this.editor.focus();
      return;
    }
    let input;
    try {
      input = JSON.parse(this.editor.value);
    } catch (error) {
      this.error.textContent = `The arguments are not valid JSON: ${error.message}`;
      this.editor.focus();
      return;
    }
    this.send({ decision: 'approve_edited', input }, 'Approved with edited arguments');
  }

  deny() {
    if (this.why.hidden) {
      this.why.hidden = false;
      this.denyButton.textContent = 'Deny with this reason';
      this.why.focus();
      return;
    }
    const message = this.why.value.trim() || 'The user denied this call.';
    this.send({ decision: 'deny', message }, 'Denied');
  }

  send(decision, label) {
    this.error.textContent = '';
    this.label = label;
    this.decide(decision);
  }

  // The server refused the decisions (an edit the tool's schema does not accept): ask again.
  refused(message) {
    this.error.textContent = message;
    (this.editor.hidden ? this.approveButton : this.editor).focus();
  }

  decided() {
    for (const node of [...this.root.children]) {
      if (!node.classList.contains('approval-reason')) node.remove();
    }
    this.root.append(el('p', 'approval-decision', this.label));
  }
}

// One assistant answer: text bubbles, reasoning and tool cards in the order they stream.
class AssistantView {
  constructor() {
    $('empty').hidden = true;
    this.root = el('div', 'message assistant');
    this.bubble = null;
    this.thinkingBubble = null;
    this.pending = null;
    this.answer = '';
    log.append(this.root);
  }

  text(text) {
    this.thinkingBubble = null;
    if (!this.bubble) {
      this.bubble = el('div', 'bubble answer markdown');
      this.bubble.source = '';
      this.root.append(this.bubble);
    }
    this.bubble.source += text;
    this.answer += text;
    // Rendered once per frame, however many fragments arrive in it.
    if (!this.pending) {
      const bubble = this.bubble;
      this.pending = requestAnimationFrame(() => {
        this.pending = null;
        this.render(bubble);
      });
    }
  }

  // Start over empty, for an answer about to be shown again from its first event.
  reset() {
    if (this.pending) cancelAnimationFrame(this.pending);
    this.root.replaceChildren();
    this.bubble = null;
    this.thinkingBubble = null;
    this.pending = null;
    this.answer = '';
    this.approvals = new Map();
    this.askers = new Map();
  }

  render(bubble) {
    renderMarkdown(bubble, bubble.source);
    scrollDown();
  }

  flush() {
    if (this.pending) {
      cancelAnimationFrame(this.pending);
      this.pending = null;
    }
    for (const bubble of this.root.querySelectorAll('.bubble.answer')) renderMarkdown(bubble, bubble.source);
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
    const card = new ToolCard(id, name, args);
    this.root.append(card.root);
    state.cards.set(id, card);
    scrollDown();
  }

  // A call waits for approval: its card asks. Once every waiting call of the answer has a
  // decision, they are sent together and the answer goes on in the same stream.
  approval(id, name, args, reason, messageId) {
    const card = state.cards.get(id);
    if (!card) return;
    this.approvals = this.approvals || new Map();
    const ask = new ApprovalCard(name, args, reason, (decision) => {
      this.approvals.set(id, decision);
      this.sendDecisions(messageId);
    });
    this.approvals.set(id, null);
    this.askers = this.askers || new Map();
    this.askers.set(id, ask);
    card.root.classList.add('waiting');
    card.state.textContent = 'needs approval';
    card.root.append(ask.root);
    if (this.askers.size === 1) ask.focus();
    setStatus('Waiting for your approval');
    scrollDown();
  }

  async sendDecisions(messageId) {
    if ([...this.approvals.values()].some((d) => d === null)) return;
    const decisions = [...this.approvals].map(([id, decision]) => ({ id, ...decision }));
    try {
      await api(`/v1/chat/${encodeURIComponent(messageId)}/approvals`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ decisions }),
      });
    } catch (error) {
      for (const [id, ask] of this.askers) {
        this.approvals.set(id, null);
        ask.refused(error.message);
      }
      return;
    }
    for (const [id, ask] of this.askers) {
      ask.decided();
      const card = state.cards.get(id);
      if (card) {
        card.root.classList.remove('waiting');
        card.state.textContent = 'running';
      }
    }
    this.approvals = new Map();
    this.askers = new Map();
    setStatus('Answering… (Escape stops)');
  }

  end(stopReason, usage, cost) {
    this.flush();
    const parts = [];
    if (usage) parts.push(usageText(usage, cost));
    if (stopReason && stopReason !== 'end_turn') parts.push(stopReason.replace(/_/g, ' '));
    if (parts.length) this.root.append(el('div', 'meta', parts.join(' · ')));
    scrollDown();
  }

  error(message) {
    this.flush();
    this.root.append(el('div', 'alert', message));
    scrollDown();
  }
}

function showToolResult(id, content, isError) {
  const card = state.cards.get(id);
  if (!card) return;
  card.result(content, isError);
  scrollDown();
}

function setStatus(text) {
  $('status').textContent = text || '';
}

function announce(text) {
  // A finished answer is announced once, not fragment by fragment.
  const announcer = $('announcer');
  announcer.textContent = '';
  setTimeout(() => { announcer.textContent = text; }, 50);
}

function setBusy(busy) {
  state.busy = busy;
  $('stop').hidden = !busy;
  updateSend();
  setStatus(busy ? 'Answering… (Escape stops)' : '');
}

function updateSend() {
  $('send').disabled = state.busy || !$('input').value.trim();
}

function clearLog() {
  state.cards.clear();
  for (const node of [...log.children]) {
    if (node.id !== 'empty') node.remove();
  }
  $('empty').hidden = false;
  state.stick = true;
  $('jump').hidden = true;
}

// ---------- Chat ----------

function handle(event, view, session) {
  const d = event.data;
  const current = session === state.session;
  switch (event.event) {
    case 'message_start':
      if (current && state.conversationId !== d.conversation_id) {
        state.conversationId = d.conversation_id;
        // The new chat gets its URL; Back still leads to where the user came from.
        history.replaceState({ conversationId: d.conversation_id }, '', chatPath(d.conversation_id));
        refreshConversations();
      }
      if (current) state.messageId = d.message_id;
      break;
    case 'text_delta': view.text(d.text); break;
    case 'thinking_delta': view.thinking(d.text); break;
    case 'tool_call_start': view.toolStart(d.id, d.name, d.arguments); break;
    case 'tool_call_result': showToolResult(d.id, d.content, d.is_error); break;
    case 'message_end':
      view.end(d.stop_reason, d.usage);
      if (current) {
        const text = view.answer.trim();
        announce(text ? `Answer finished: ${text.slice(0, 300)}` : 'Answer finished');
      }
      break;
    case 'error':
      view.error(d.message);
      if (current) announce(`The answer failed: ${d.message}`);
      break;
    case 'approval_requested':
      view.approval(d.id, d.name, d.arguments, d.reason, state.messageId);
      break;
    default: break; // newer events of protocol 1
  }
}

// How long to wait before each reconnect: a restarting server needs a few seconds.
const RECONNECT_DELAYS_MS = [250, 500, 1000, 2000, 4000, 4000, 4000, 4000];

// Read an answer to its end, reconnecting with Last-Event-ID if the connection drops. A server
// that restarted meanwhile may have cut the events after its last checkpoint (409 for an id it
// no longer has): the answer is then shown again from its first event.
async function follow(response, view, session) {
  let messageId = state.messageId;
  let lastEventId = null;
  for (let attempt = 0; ; attempt += 1) {
    let ended = false;
    if (response) {
      try {
        for await (const event of readEvents(response)) {
          if (event.id !== null) lastEventId = event.id;
          if (event.event === 'message_start') messageId = event.data.message_id;
          if (event.event === 'message_end') ended = true;
          handle(event, view, session);
        }
        if (ended) return;
      } catch (error) {
        if (ended) return;
        if (attempt >= RECONNECT_DELAYS_MS.length) throw error;
      }
    }
    if (attempt >= RECONNECT_DELAYS_MS.length || !messageId) throw new Error('the connection was lost');
    if (session === state.session) setStatus('Reconnecting…');
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_DELAYS_MS[attempt]));
    response = null;
    try {
      response = await reconnect(messageId, lastEventId);
    } catch (error) {
      if (error.status === 409 && lastEventId !== null) {
        view.reset();
        lastEventId = null;
        response = await reconnect(messageId, null);
      } else if (error.status !== undefined && error.status < 500) {
        throw error; // the answer is unknown, or the request is refused: retrying will not help
      }
      // Otherwise the server is not back yet: the loop waits and tries again.
    }
    if (response && session === state.session) setStatus('Answering… (Escape stops)');
  }
}

function reconnect(messageId, lastEventId) {
  const headers = lastEventId === null ? {} : { 'Last-Event-ID': lastEventId };
  return api(`/v1/chat/${encodeURIComponent(messageId)}/events`, { headers });
}

async function send(text) {
  const session = state.session;
  setBusy(true);
  showUser(text);
  scrollDown(true);
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
    await follow(response, view, session);
  } catch (error) {
    view.error(error.message);
  } finally {
    if (session === state.session) setBusy(false);
    refreshConversations();
  }
}

function stopAnswer() {
  if (state.busy && state.messageId) {
    api(`/v1/chat/${encodeURIComponent(state.messageId)}/cancel`, { method: 'POST' }).catch((e) => setStatus(e.message));
  }
}

// ---------- Conversations ----------

function chatPath(id) {
  return `/c/${encodeURIComponent(id)}`;
}

function chatIdFromPath() {
  const match = /^\/c\/([^/]+)$/.exec(location.pathname);
  return match ? decodeURIComponent(match[1]) : null;
}

function showTitle() {
  const title = state.titles.get(state.conversationId);
  $('title').textContent = state.conversationId ? title || 'Untitled' : 'New chat';
  document.title = state.conversationId && title ? `${title} · agentloop` : 'agentloop';
}

async function refreshConversations() {
  const list = $('conversations');
  let conversations;
  try {
    conversations = (await (await api('/v1/conversations')).json()).conversations;
  } catch (error) {
    setStatus(error.message);
    return;
  }
  if (list.querySelector('.rename')) return; // do not drop a title being edited
  list.replaceChildren();
  state.titles.clear();
  if (!conversations.length) {
    list.append(el('li', 'none', 'No conversations yet'));
  }
  for (const c of conversations) {
    state.titles.set(c.id, c.title);
    list.append(conversationItem(c));
  }
  showTitle();
}

function conversationItem(c) {
  const item = el('li');
  const open = el('button', `open${c.id === state.conversationId ? ' active' : ''}`, c.title || 'Untitled');
  open.type = 'button';
  open.title = `${c.title}\n${new Date(c.updated_at).toLocaleString()}`;
  if (c.id === state.conversationId) open.setAttribute('aria-current', 'page');
  open.addEventListener('click', () => navigate(c.id));
  const rename = el('button', 'item-action', '✎');
  rename.type = 'button';
  rename.setAttribute('aria-label', `Rename “${c.title}”`);
  rename.addEventListener('click', () => startRename(item, c));
  const remove = el('button', 'item-action', '×');
  remove.type = 'button';
  remove.setAttribute('aria-label', `Delete “${c.title}”`);
  remove.addEventListener('click', () => deleteConversation(c));
  item.append(open, rename, remove);
  return item;
}

function startRename(item, c) {
  const input = el('input', 'rename');
  input.value = c.title;
  input.setAttribute('aria-label', 'New title (Enter saves, Escape cancels)');
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (save && title && title !== c.title) {
      try {
        await api(`/v1/conversations/${encodeURIComponent(c.id)}`, {
          method: 'PATCH',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ title }),
        });
      } catch (error) {
        setStatus(error.message);
      }
    }
    input.remove();
    await refreshConversations();
  };
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') { event.preventDefault(); finish(true); }
    if (event.key === 'Escape') { event.preventDefault(); event.stopPropagation(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
  item.replaceChildren(input);
  input.focus();
  input.select();
}

async function deleteConversation(c) {
  if (!confirm(`Delete “${c.title}”? This cannot be undone.`)) return;
  try {
    await api(`/v1/conversations/${encodeURIComponent(c.id)}`, { method: 'DELETE' });
  } catch (error) {
    setStatus(error.message);
    return;
  }
  if (c.id === state.conversationId) {
    showNewChat();
    history.replaceState({ conversationId: null }, '', '/');
  }
  refreshConversations();
}

function isPrompt(message) {
  return message.role === 'user' && !message.content.some((b) => b.type === 'tool_result');
}

function renderHistory(messages, answers) {
  const byPrompt = new Map((answers || []).map((a) => [a.prompt_index, a]));
  let view = null;
  let answer = null;
  const close = () => {
    if (view) {
      view.flush();
      if (answer) view.end(answer.stop_reason, answer.usage, answer.cost);
    }
  };
  messages.forEach((message, index) => {
    if (message.role === 'user') {
      for (const block of message.content) {
        if (block.type === 'tool_result') showToolResult(block.tool_use_id, block.content, !!block.is_error);
      }
      if (isPrompt(message)) {
        close();
        showUser(message.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
        view = null;
        answer = byPrompt.get(index) || null;
      }
    } else if (message.role === 'assistant') {
      if (!view) view = new AssistantView();
      for (const block of message.content) {
        if (block.type === 'text') view.text(block.text);
        else if (block.type === 'thinking') view.thinking(block.thinking);
        else if (block.type === 'tool_use') view.toolStart(block.id, block.name, block.input);
      }
    }
  });
  close();
}

function closeDrawer() {
  const sidebar = $('sidebar');
  if (!sidebar.classList.contains('open')) return;
  sidebar.classList.remove('open');
  $('backdrop').hidden = true;
  document.querySelector('.main').inert = false;
  $('toggle-sidebar').setAttribute('aria-expanded', 'false');
  if (sidebar.contains(document.activeElement)) $('toggle-sidebar').focus();
}

function openDrawer() {
  $('sidebar').classList.add('open');
  $('backdrop').hidden = false;
  // Like a dialog: keyboard focus stays in the drawer until it closes.
  document.querySelector('.main').inert = true;
  $('toggle-sidebar').setAttribute('aria-expanded', 'true');
  const first = $('sidebar').querySelector('button');
  if (first) first.focus();
}

// Show the chat `id` (a user's pick, Back/Forward, or a reload of /c/<id>).
async function openConversation(id) {
  const session = ++state.session;
  closeDrawer();
  let conversation;
  try {
    conversation = await (await api(`/v1/conversations/${encodeURIComponent(id)}`)).json();
  } catch (error) {
    if (session !== state.session) return;
    showNewChat();
    if (error.status === 404) history.replaceState({ conversationId: null }, '', '/');
    await refreshConversations();
    setStatus(error.message);
    return;
  }
  if (session !== state.session) return;
  state.conversationId = conversation.id;
  state.titles.set(conversation.id, conversation.title);
  state.messageId = null;
  setBusy(false);
  clearLog();
  const running = conversation.active_message_id;
  let messages = conversation.messages;
  if (running) {
    // The running answer is replayed from its start, so show the history up to its prompt.
    const last = messages.map(isPrompt).lastIndexOf(true);
    messages = messages.slice(0, last + 1);
  }
  renderHistory(messages, conversation.answers);
  scrollDown(true);
  showTitle();
  refreshConversations();
  if (running) {
    setBusy(true);
    state.messageId = running;
    const view = new AssistantView();
    try {
      await follow(await api(`/v1/chat/${encodeURIComponent(running)}/events`), view, session);
    } catch (error) {
      view.error(error.message);
    } finally {
      if (session === state.session) setBusy(false);
    }
  }
}

function navigate(id) {
  if (id !== state.conversationId || chatIdFromPath() !== id) {
    history.pushState({ conversationId: id }, '', chatPath(id));
  }
  openConversation(id);
}

function showNewChat() {
  state.session += 1;
  state.conversationId = null;
  state.messageId = null;
  setBusy(false);
  clearLog();
  showTitle();
}

function newChat() {
  if (location.pathname !== '/') history.pushState({ conversationId: null }, '', '/');
  showNewChat();
  closeDrawer();
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
    // An empty box (or one of spaces) sends nothing and is left as it is.
    event.preventDefault();
    if ($('input').value.trim()) $('composer').requestSubmit();
  }
});
$('input').addEventListener('input', () => {
  autoGrow();
  updateSend();
});

log.addEventListener('scroll', () => {
  state.stick = atBottom();
  if (state.stick) $('jump').hidden = true;
});
$('jump').addEventListener('click', () => {
  $('jump').hidden = true;
  scrollDown(true);
});

$('stop').addEventListener('click', stopAnswer);
document.addEventListener('keydown', (event) => {
  if (event.key !== 'Escape' || event.defaultPrevented) return;
  if ($('sidebar').classList.contains('open')) {
    closeDrawer();
  } else if (state.busy) {
    stopAnswer();
  }
});

$('new-chat').addEventListener('click', newChat);
$('toggle-sidebar').addEventListener('click', () => {
  if ($('sidebar').classList.contains('open')) closeDrawer();
  else openDrawer();
});
$('backdrop').addEventListener('click', closeDrawer);

window.addEventListener('popstate', () => {
  const id = chatIdFromPath();
  if (id) {
    openConversation(id);
  } else {
    showNewChat();
    refreshConversations();
  }
});

const tokenInput = $('token');
tokenInput.value = localStorage.getItem(TOKEN_KEY) || '';
tokenInput.addEventListener('change', () => {
  const token = tokenInput.value.trim();
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
  refreshConversations();
});

updateSend();
const initial = chatIdFromPath();
if (initial) openConversation(initial);
else refreshConversations();
