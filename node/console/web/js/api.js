// Calls to the node's API from the console: the API key, when the node
// needs one, and a reader of Server-Sent Events streamed by fetch.

const keyName = 'meshnode.apiKey';

export function apiKey() { return sessionStorage.getItem(keyName) || ''; }
export function setAPIKey(k) { k ? sessionStorage.setItem(keyName, k) : sessionStorage.removeItem(keyName); }

// Unauthorized is thrown when the node refuses the key (or its absence).
export class Unauthorized extends Error {}

// api fetches path from the node with the API key, if one is set. A
// browser cannot add the header on its own, so every call goes through here.
export async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  const k = apiKey();
  if (k) headers.set('Authorization', 'Bearer ' + k);
  const resp = await fetch(path, { ...init, headers, cache: 'no-store' });
  if (resp.status === 401) throw new Unauthorized(await errorText(resp));
  return resp;
}

// json fetches path and decodes its JSON answer; a status other than 200
// is thrown as the API's error message.
export async function json(path, init) {
  const resp = await api(path, init);
  if (!resp.ok) throw new Error(await errorText(resp));
  return resp.json();
}

// errorText is the message of an API error answer.
export async function errorText(resp) {
  const body = await resp.text();
  try { return JSON.parse(body).error.message || body; } catch { return `${resp.status} ${body}`; }
}

// readSSE reads resp's body as Server-Sent Events as they arrive, calling
// onEvent(name, data) for each ('message' for an unnamed one); it returns
// when the stream ends.
export async function readSSE(resp, onEvent) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = '', name = '', data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += value;
    const lines = pending.split('\n');
    pending = lines.pop(); // the line not ended yet
    for (let line of lines) {
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length) onEvent(name || 'message', data.join('\n'));
        name = ''; data = [];
      } else if (line.startsWith(':')) {
        // a comment: the node's keepalive
      } else {
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let v = i < 0 ? '' : line.slice(i + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'event') name = v;
        else if (field === 'data') data.push(v);
      }
    }
  }
}
