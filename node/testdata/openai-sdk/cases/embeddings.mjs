// Embeddings: the SDK asks for base64 by default and decodes it; the
// vectors are unit length, the same as float ones, one per input.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const input = ['A man walks into a bar', 'The cat sat on the mat.'];
const b64 = await client.embeddings.create({ model, input });
const floats = await client.embeddings.create({ model, input, encoding_format: 'float' });
assert.equal(b64.data.length, 2);
assert.ok(b64.usage.prompt_tokens > 0);
for (let i = 0; i < 2; i++) {
  const a = b64.data[i].embedding, b = floats.data[i].embedding;
  assert.equal(b64.data[i].index, i);
  assert.equal(a.length, b.length);
  const norm = Math.hypot(...a);
  assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  for (let j = 0; j < a.length; j++) assert.ok(Math.abs(a[j] - b[j]) < 1e-6, `component ${j}: ${a[j]} vs ${b[j]}`);
}
