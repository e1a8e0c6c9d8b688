// The chat playground: POST /v1/chat/completions with stream:true, the
// answer shown piece by piece as its events arrive, the conversation kept
// in the page.

import { api, readSSE, errorText, json, Unauthorized } from './api.js';
import { $, el, num } from './dom.js';

let history = [];
let busy = false;

export async function refreshModels() {
  const list = await json('/v1/models');
  const sel = $('#chat-model');
  const keep = sel.value;
  const ids = list.data.map(m => m.id);
  if (ids.join('\n') === [...sel.options].map(o => o.value).join('\n')) return;
  sel.replaceChildren(...list.data.map(m => el('option', { value: m.id }, m.id + (m.local ? '' : ' (peer)'))));
  if (ids.includes(keep)) sel.value = keep;
  sendable();
}

function sendable() { $('#chat-send').disabled = busy || !$('#chat-model').value; }

export function setupChat(onAuth) {
  $('#chat-send').addEventListener('click', () => send(onAuth));
  $('#chat-input').addEventListener('keydown', e => {
    if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(onAuth); }
  });
  $('#chat-clear').addEventListener('click', () => { history = []; $('#chat-log').replaceChildren(); $('#chat-status').textContent = ''; });
  sendable();
}

async function send(onAuth) {
  const text = $('#chat-input').value.trim();
  const model = $('#chat-model').value;
  if (!text || !model || busy) return;
  busy = true; sendable();
  $('#chat-input').value = '';
  const log = $('#chat-log');
  log.append(el('div', { class: 'msg user' }, text));
  const out = el('div', { class: 'msg assistant', id: 'chat-answer' });
  const prev = log.querySelector('#chat-answer');
  if (prev) prev.removeAttribute('id');
  log.append(out);
  const status = $('#chat-status');
  status.textContent = 'waiting for the model…';
  const messages = [...history, { role: 'user', content: text }];
  const started = performance.now();
  let answer = '', first = 0, usage = null, failed = '';
  try {
    const req = { model, messages, stream: true, stream_options: { include_usage: true }, max_tokens: Number($('#chat-max').value) || 128 };
    const temp = $('#chat-temp').value;
    if (temp !== '') req.temperature = Number(temp); // else the node's default: greedy
    const resp = await api('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(req),
    });
    if (!resp.ok) throw new Error(await errorText(resp));
    out.dataset.state = 'streaming';
    await readSSE(resp, (_, data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) { failed = chunk.error.message; return; }
      if (chunk.usage) usage = chunk.usage;
      const piece = chunk.choices && chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content;
      if (piece) {
        if (!first) first = performance.now();
        answer += piece;
        out.append(piece);
        log.scrollTop = log.scrollHeight;
      }
    });
  } catch (e) {
    failed = e.message;
    if (e instanceof Unauthorized) onAuth();
  }
  out.dataset.state = failed ? 'failed' : 'done';
  if (failed) {
    out.classList.add('error');
    out.append(el('div', { class: 'error small' }, failed));
    status.textContent = '';
  } else {
    history = [...messages, { role: 'assistant', content: answer }];
    const ms = performance.now() - started;
    let s = `${num(ms)} ms`;
    if (first) s += ` · first text after ${num(first - started)} ms`;
    if (usage) {
      s += ` · ${usage.prompt_tokens} → ${usage.completion_tokens} tokens`;
      const en = usage.energy;
      if (en && en.uj_per_accepted_token) s += ` · ${num(en.uj_per_accepted_token)} µJ/token`;
      if (en && en.receipt) s += ` · receipt #${en.receipt.sequence}`;
      status.title = en && en.route ? 'route: ' + en.route : '';
    }
    status.textContent = s;
  }
  busy = false; sendable();
}
