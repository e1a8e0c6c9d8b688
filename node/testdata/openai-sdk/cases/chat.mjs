// A chat completion, not streamed: the SDK parses meshnode's answer, and
// usage carries the receipt in usage.energy.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const res = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'A man walks into a bar' }],
  max_tokens: 8,
});
assert.equal(res.object, 'chat.completion');
assert.equal(res.choices.length, 1);
assert.equal(res.choices[0].message.role, 'assistant');
assert.ok(res.choices[0].message.content.length > 0, 'empty answer');
assert.ok(['stop', 'length'].includes(res.choices[0].finish_reason));
assert.ok(res.usage.completion_tokens > 0 && res.usage.completion_tokens <= 8);
assert.ok(res.usage.energy && res.usage.energy.envelope_hex, 'no receipt in usage.energy');
