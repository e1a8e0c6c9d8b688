// The console's entry point: asks for the API key when the node wants
// one, then keeps every panel current.

import { apiKey, setAPIKey, json, Unauthorized } from './api.js';
import { $ } from './dom.js';
import { renderMesh } from './mesh.js';
import { follow, setStatus } from './feed.js';
import { refreshReceipts } from './receipts.js';
import { setupChat, refreshModels } from './chat.js';

let keyWaiters = [];

// needKey shows the key form and resolves once a key has been given.
function needKey(message) {
  $('#auth').hidden = false;
  $('#auth-error').textContent = apiKey() ? message || 'the node refused this key' : '';
  $('#auth-key').focus();
  return new Promise(resolve => keyWaiters.push(resolve));
}

function setupAuth() {
  const save = () => {
    const k = $('#auth-key').value.trim();
    if (!k) return;
    setAPIKey(k);
    $('#auth-key').value = '';
    $('#auth').hidden = true;
    $('#forget-key').hidden = false;
    const w = keyWaiters; keyWaiters = [];
    w.forEach(r => r());
  };
  $('#auth-save').addEventListener('click', save);
  $('#auth-key').addEventListener('keydown', e => { if (e.key === 'Enter') save(); });
  $('#forget-key').hidden = !apiKey();
  $('#forget-key').addEventListener('click', () => { setAPIKey(''); location.reload(); });
}

// every runs f now and then every ms, asking for the key when refused.
function every(ms, f) {
  const tick = async () => {
    try { await f(); } catch (e) {
      if (e instanceof Unauthorized) await needKey(e.message);
      else console.warn(e);
    }
    setTimeout(tick, ms);
  };
  tick();
}

let receiptTimer = 0;
function receiptsSoon() {
  clearTimeout(receiptTimer);
  receiptTimer = setTimeout(() => refreshReceipts().catch(console.warn), 150);
}

setupAuth();
setupChat(() => needKey());
every(2000, async () => { const st = await json('/api/status'); renderMesh(st); setStatus(st); });
every(5000, refreshModels);
every(10000, refreshReceipts);
follow(() => needKey(), receiptsSoon);
