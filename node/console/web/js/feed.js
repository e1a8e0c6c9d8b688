// The live request log and the per-model table: GET /api/events, a
// Server-Sent Events stream read with fetch (an EventSource cannot send
// the API key), reconnecting when it ends.

import { api, readSSE, Unauthorized, errorText } from './api.js';
import { $, el, fill, short, num, energy, clock } from './dom.js';

const maxRows = 100;
const stats = new Map(); // model → its totals (ModelStats)
let status = null;       // the last /api/status, for where each model is served
let onRequest = () => {};

export function setStatus(st) { status = st; renderModels(); }

// follow streams the log until the page closes; onAuth is called when the
// node wants the key, onReq after each request (to refresh receipts).
export async function follow(onAuth, onReq) {
  onRequest = onReq;
  for (;;) {
    try {
      const resp = await api('/api/events');
      if (!resp.ok) throw new Error(await errorText(resp));
      live(true);
      await readSSE(resp, handle);
    } catch (e) {
      if (e instanceof Unauthorized) { live(false); await onAuth(); continue; }
    }
    live(false);
    await new Promise(r => setTimeout(r, 2000));
  }
}

function live(on) {
  const p = $('#live');
  p.textContent = on ? 'log: live' : 'log: reconnecting';
  p.classList.toggle('live', on);
}

function handle(name, data) {
  const v = JSON.parse(data);
  const tbody = $('#log tbody');
  if (name === 'snapshot') {
    stats.clear();
    for (const m of v.models) stats.set(m.model, m);
    fill(tbody, v.recent.reverse().map(row), 'no requests yet');
    note(v.dropped);
    renderModels();
  } else if (name === 'request') {
    if (tbody.querySelector('td[colspan]')) tbody.replaceChildren();
    const tr = row(v);
    tr.classList.add('fresh');
    tbody.prepend(tr);
    while (tbody.rows.length > maxRows) tbody.deleteRow(-1);
    if (v.model_stats) { stats.set(v.model, v.model_stats); renderModels(); }
    onRequest(v);
  } else if (name === 'dropped') {
    note(v.dropped, true);
  }
}

function note(n, now) {
  if (n) $('#log-note').textContent = now ? `(${n} missed: this tab read too slowly)` : `(${n} events missed by slow viewers)`;
}

function row(e) {
  const ok = e.status === 200 && !e.error;
  const route = e.route === 'peer' ? `peer ${short(e.peer, 8)}` : e.route === 'local' && e.relayed_for ? `local for ${short(e.relayed_for, 8)}` : e.route || '';
  return el('tr', { 'data-seq': e.seq, 'data-receipt': e.receipt || '' },
    el('td', {}, clock(e.time)),
    el('td', { class: 'mono' }, e.endpoint + (e.stream ? ' ⇢' : '')),
    el('td', {}, e.model || ''),
    el('td', {}, route),
    el('td', { class: ok ? 'ok' : 'bad', title: e.error || '' }, e.status + (e.error ? ' ⚠' : '')),
    el('td', { class: 'num' }, e.route === 'local' && ok ? `${e.prompt_tokens} → ${e.completion_tokens}` : ''),
    el('td', { class: 'num' }, num(e.duration_ms)),
    el('td', { class: 'num' }, e.energy_uj ? num(e.energy_uj) : ''),
    el('td', { class: 'mono', title: e.receipt || '' }, short(e.receipt, 10)),
  );
}

function renderModels() {
  const where = new Map();
  const add = (m, w) => { if (!where.has(m)) where.set(m, []); where.get(m).push(w); };
  if (status) {
    for (const m of status.models || []) add(m.name, `here (${m.backend}${m.draft ? `, drafts by ${m.draft}` : ''})`);
    for (const p of status.peers || []) for (const m of p.models || []) add(m, short(p.hostname || p.id, 12));
  }
  for (const m of stats.keys()) if (!where.has(m)) where.set(m, []);
  const rows = [...where.keys()].sort().map(m => {
    const s = stats.get(m) || {};
    return el('tr', { 'data-model': m },
      el('td', {}, m),
      el('td', { class: 'wrap' }, where.get(m).join(', ')),
      el('td', { class: 'num' }, num(s.requests || 0)),
      el('td', { class: 'num' }, num(s.served || 0)),
      el('td', { class: 'num tps' }, s.tokens_per_second ? num(s.tokens_per_second, 1) : ''),
      el('td', { class: 'num ujt' }, s.uj_per_token ? num(s.uj_per_token, 0) : ''),
      el('td', { class: 'num' }, energy(s.energy_uj)),
    );
  });
  fill($('#models tbody'), rows, 'no models');
}
