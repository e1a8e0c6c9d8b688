// Structured outputs read back by the SDK's own helpers: chat.completions
// .parse (which JSON-parses a json_schema answer into message.parsed) and
// the streaming helper's final, parsed completion. Even the built-in
// fortunes model, which knows nothing of JSON, answers in the schema,
// because meshnode enforces it while decoding.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const schema = {
  type: 'object',
  properties: {
    mood: { type: 'string', enum: ['happy', 'sad', 'wry'] },
    title: { type: 'string', maxLength: 12 },
    tags: { type: 'array', items: { type: 'boolean' }, minItems: 1, maxItems: 3 },
  },
  required: ['mood', 'title', 'tags'],
  additionalProperties: false,
};
const response_format = { type: 'json_schema', json_schema: { name: 'fortune', schema, strict: true } };

function check(parsed) {
  assert.equal(typeof parsed, 'object');
  assert.deepEqual(Object.keys(parsed).sort(), ['mood', 'tags', 'title']);
  assert.ok(['happy', 'sad', 'wry'].includes(parsed.mood), `mood ${parsed.mood}`);
  assert.equal(typeof parsed.title, 'string');
  assert.ok([...parsed.title].length <= 12, `title ${parsed.title}`);
  assert.ok(Array.isArray(parsed.tags) && parsed.tags.length >= 1 && parsed.tags.length <= 3);
  for (const t of parsed.tags) assert.equal(typeof t, 'boolean');
}

const messages = [{ role: 'user', content: 'Describe your fortune as JSON.' }];
const res = await client.chat.completions.parse({ model, messages, max_tokens: 200, response_format });
assert.equal(res.choices[0].finish_reason, 'stop');
check(res.choices[0].message.parsed);

const stream = client.chat.completions.stream({ model, messages, max_tokens: 200, response_format, temperature: 0.8, seed: 7 });
const final = await stream.finalChatCompletion();
check(final.choices[0].message.parsed);

// json_object: any JSON object. Unbounded, so this model may run out of
// tokens inside a string (finish_reason "length", as OpenAI answers); the
// answer is an object all the same, and a whole one when it stops.
const obj = await client.chat.completions.create({ model, messages, max_tokens: 200, response_format: { type: 'json_object' } });
const text = obj.choices[0].message.content;
assert.ok(text.startsWith('{'), text);
if (obj.choices[0].finish_reason === 'stop') {
  const v = JSON.parse(text);
  assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
} else {
  assert.equal(obj.choices[0].finish_reason, 'length');
}

// A schema feature meshnode does not enforce is a 400 the SDK raises.
await assert.rejects(
  client.chat.completions.create({ model, messages, max_tokens: 8,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', format: 'ipv6' } } } }),
  (err) => err.status === 400 && /format/.test(err.message),
);
