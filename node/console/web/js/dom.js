// Small DOM and formatting helpers. Everything shown is set as text,
// never as HTML: model names and hostnames come from peers' gossip.

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ''));
  return e;
}

export function svg(tag, attrs = {}, text) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

export function $(sel) { return document.querySelector(sel); }

export function fill(tbody, rows, empty) {
  tbody.replaceChildren(...rows);
  if (!rows.length && empty) tbody.append(el('tr', {}, el('td', { colspan: 12, class: 'muted' }, empty)));
}

export function short(id, n = 10) { return id && id.length > n ? id.slice(0, n) + '…' : id || ''; }

export function bytes(n) {
  if (!n) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(n < 10 && i ? 1 : 0)} ${units[i]}`;
}

export function num(v, digits = 0) {
  if (v === undefined || v === null || Number.isNaN(v)) return '';
  return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// energy shows µJ in the unit that reads best.
export function energy(uj) {
  if (!uj) return '';
  if (uj >= 1e6) return num(uj / 1e6, 2) + ' J';
  if (uj >= 1e3) return num(uj / 1e3, 1) + ' mJ';
  return num(uj) + ' µJ';
}

export function clock(t) { return new Date(t).toLocaleTimeString(); }
