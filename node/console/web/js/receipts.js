// The receipts panel: the steward's latest receipts, each checked by the
// node (signature and chain link), from GET /api/receipts.

import { json } from './api.js';
import { $, el, fill, short, num } from './dom.js';

export async function refreshReceipts() {
  const page = await json('/api/receipts?limit=20');
  $('#receipts-note').textContent = `(steward ${short(page.steward, 20)}, ${page.next_sequence} sealed)`;
  $('#receipts-note').title = page.steward;
  fill($('#receipts tbody'), page.receipts.map(r => el('tr', { 'data-receipt': r.id, 'data-verified': String(r.verified) },
    el('td', { class: 'num' }, r.sequence),
    el('td', { class: 'mono', title: r.id + '\nrequest ' + r.request_id }, short(r.id, 12)),
    el('td', { title: r.backend }, r.recipe + (r.cut_short ? ` (cut: ${r.cut_short})` : '')),
    el('td', { class: 'num' }, `${r.tokens_in} / ${r.tokens_out}`),
    el('td', { class: 'num', title: r.energy_provenance }, num(r.energy_uj)),
    el('td', { class: 'num' }, r.uj_per_accepted_token ? num(r.uj_per_accepted_token) : ''),
    el('td', { class: r.verified ? 'ok verified' : 'bad verified', title: r.verification }, r.verified ? '✓ ok' : '✗ ' + r.verification),
  )), 'no receipts yet');
}
