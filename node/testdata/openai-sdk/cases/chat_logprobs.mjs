// Logprobs on a chat completion, whole and streamed: the SDK's types hold
// them; each token has its bytes and top alternatives, the greedy token
// heads them, and the tokens' bytes make the text.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

function checkTokens(items, text, top) {
  assert.ok(items.length > 0, 'no tokens');
  const bytes = [];
  for (const t of items) {
    assert.ok(t.logprob <= 0, `logprob ${t.logprob}`);
    assert.equal(t.top_logprobs.length, top);
    assert.equal(t.top_logprobs[0].logprob, t.logprob, 'the greedy token does not head its alternatives');
    for (let i = 1; i < top; i++) assert.ok(t.top_logprobs[i].logprob <= t.top_logprobs[i - 1].logprob);
    bytes.push(...t.bytes);
  }
  assert.equal(Buffer.from(bytes).toString('utf8'), text);
}

const req = { model, messages: [{ role: 'user', content: 'The cat sat on the mat' }], max_tokens: 10, logprobs: true, top_logprobs: 3 };
const res = await client.chat.completions.create(req);
checkTokens(res.choices[0].logprobs.content, res.choices[0].message.content, 3);

const stream = await client.chat.completions.create({ ...req, stream: true });
let text = '';
const items = [];
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    text += c.delta.content ?? '';
    if (c.logprobs) items.push(...c.logprobs.content);
  }
}
checkTokens(items, text, 3);
assert.equal(text, res.choices[0].message.content, 'the stream and the whole answer differ (greedy)');
assert.deepEqual(items.map(t => t.logprob), res.choices[0].logprobs.content.map(t => t.logprob));
