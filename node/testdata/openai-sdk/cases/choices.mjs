// Several choices through the SDK: n on chat (whole and streamed) and a
// batch of prompts on completions; each choice is a serve of its own,
// its receipt in choices[i].energy.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const messages = [{ role: 'user', content: 'Love is' }];
const chat = await client.chat.completions.create({ model, messages, n: 2, seed: 3, temperature: 0.9, max_tokens: 8 });
assert.equal(chat.choices.length, 2);
chat.choices.forEach((c, i) => {
  assert.equal(c.index, i);
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.energy.envelope_hex, `no receipt for choice ${i}`);
});
assert.notEqual(chat.choices[0].energy.envelope_hex, chat.choices[1].energy.envelope_hex);
assert.equal(chat.usage.energy, undefined);
assert.ok(chat.usage.completion_tokens > 0 && chat.usage.completion_tokens <= 16, `${chat.usage.completion_tokens} tokens`);

// Choice 1 of seed 3 is what seed 4 alone answers.
const alone = await client.chat.completions.create({ model, messages, seed: 4, temperature: 0.9, max_tokens: 8 });
assert.equal(chat.choices[1].message.content, alone.choices[0].message.content);

// Streamed: the chunks name their choice, each ends with its receipt.
const stream = await client.chat.completions.create({ model, messages, n: 2, seed: 3, temperature: 0.9, max_tokens: 8, stream: true });
const text = ['', ''];
const ended = [];
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    text[c.index] += c.delta.content ?? '';
    if (c.finish_reason) {
      assert.ok(c.energy.envelope_hex);
      ended.push(c.index);
    }
  }
}
assert.deepEqual(text, chat.choices.map((c) => c.message.content));
assert.deepEqual(ended.sort(), [0, 1]);

// A batch of prompts on completions: one choice each, in order.
const batch = await client.completions.create({ model, prompt: ['A man walks into a bar', 'Love is'], max_tokens: 6 });
assert.equal(batch.choices.length, 2);
const first = await client.completions.create({ model, prompt: 'A man walks into a bar', max_tokens: 6 });
assert.equal(batch.choices[0].text, first.choices[0].text);
assert.equal(batch.choices[1].index, 1);
