// The mesh panel: a map of this node and its peers, with the round trip
// to each, and a table of what each node is and serves (GET /api/status).

import { $, el, svg, fill, short, bytes, num } from './dom.js';

// nodesOf is this node then its peers, in one shape.
function nodesOf(st) {
  const hw = st.hardware || {};
  const self = {
    id: st.node_id, self: true, role: 'this node', hostname: hw.hostname,
    models: (st.models || []).map(m => m.name), admission: 'accepting',
    gpus: hw.gpus || [], memory: hw.memory ? hw.memory.total_bytes : 0,
  };
  const peers = (st.peers || []).map(p => ({
    id: p.id, rtt: p.rtt_ms, role: p.role + (p.stages ? ' + stages' : ''), hostname: p.hostname,
    models: p.models || [], admission: p.admission, gpus: p.gpus || [], memory: p.memory_bytes,
  }));
  return [self, ...peers];
}

function gpuText(gpus) {
  return gpus.map(g => g.name + (g.vram_bytes ? ` (${bytes(g.vram_bytes)})` : '')).join(', ') || 'none';
}

export function renderMesh(st) {
  const nodes = nodesOf(st);
  $('#self').textContent = `${short(st.node_id, 12)} · v${st.version} · up ${st.uptime}`;
  $('#self').title = st.node_id;
  fill($('#nodes tbody'), nodes.map(n => el('tr', { 'data-node': n.id, class: n.self ? 'self' : '' },
    el('td', { class: 'mono', title: n.id }, short(n.id, 12), n.hostname ? el('div', { class: 'muted small' }, n.hostname) : ''),
    el('td', {}, n.role || ''),
    el('td', { class: 'num' }, n.self ? '' : n.rtt ? num(n.rtt, 1) + ' ms' : '…'),
    el('td', {}, n.models.join(', ')),
    el('td', {}, gpuText(n.gpus)),
    el('td', { class: 'num' }, bytes(n.memory)),
    el('td', {}, n.admission || ''),
  )));
  drawMap(nodes);
}

// drawMap puts this node in the middle and its peers on a circle around
// it, each link labelled with its round trip.
function drawMap(nodes) {
  const map = $('#map');
  const peers = nodes.slice(1);
  // One peer sits to the right; more go round, the first to the right.
  const cx = peers.length === 1 ? 120 : 210, cy = 110;
  const pos = peers.map((_, i) => {
    if (peers.length === 1) return [300, cy];
    const a = (2 * Math.PI * i) / peers.length;
    return [cx + 150 * Math.cos(a), cy + 75 * Math.sin(a)];
  });
  const parts = [];
  peers.forEach((p, i) => {
    const [x, y] = pos[i];
    parts.push(svg('line', { x1: cx, y1: cy, x2: x, y2: y }));
    if (p.rtt) parts.push(svg('text', { x: (cx + x) / 2, y: (cy + y) / 2 - 4, class: 'rtt' }, num(p.rtt, 1) + ' ms'));
  });
  const node = (n, x, y) => {
    const g = svg('g', {});
    const cls = n.self ? 'self' : n.admission && n.admission !== 'accepting' ? 'paused' : '';
    g.append(svg('circle', { cx: x, cy: y, r: n.self ? 14 : 11, class: cls }));
    g.append(svg('text', { x, y: y + 26 }, n.hostname || short(n.id, 8)));
    if (n.models.length) g.append(svg('text', { x, y: y + 39, class: 'rtt' }, short(n.models.join(', '), 28)));
    g.append(svg('title', {}, `${n.id}\n${n.role}\n${gpuText(n.gpus)}`));
    return g;
  };
  parts.push(node(nodes[0], cx, cy));
  peers.forEach((p, i) => parts.push(node(p, ...pos[i])));
  if (!peers.length) parts.push(svg('text', { x: cx, y: cy + 60, class: 'rtt' }, 'no peers yet'));
  map.replaceChildren(...parts);
}
