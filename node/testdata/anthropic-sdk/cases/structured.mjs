// Anthropic's structured outputs through the SDK: output_config.format's
// JSON Schema holds the answer, which parses and fits it.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const schema = {
  type: 'object',
  properties: { answer: { type: 'string', maxLength: 10 }, sure: { type: 'boolean' } },
  required: ['answer', 'sure'],
  additionalProperties: false,
};
const msg = await client.messages.create({
  model, max_tokens: 200, messages: [{ role: 'user', content: 'Is it true?' }],
  output_config: { format: { type: 'json_schema', schema } },
});
const v = JSON.parse(msg.content[0].text);
assert.equal(typeof v.answer, 'string');
assert.ok(v.answer.length <= 10);
assert.equal(typeof v.sure, 'boolean');
assert.deepEqual(Object.keys(v).sort(), ['answer', 'sure']);
