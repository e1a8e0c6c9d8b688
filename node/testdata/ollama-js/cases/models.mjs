// Ollama's model endpoints through its library: list, ps, show, version,
// embed, and the older embeddings.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const list = await client.list();
const m = list.models.find((x) => x.name === model);
assert.ok(m, `${model} not in ${JSON.stringify(list.models)}`);
assert.equal(m.details.format, 'gguf');
assert.equal(m.details.quantization_level, 'Q8_0');
assert.ok(m.size > 0);

const ps = await client.ps();
assert.ok(ps.models.some((x) => x.name === model));

const show = await client.show({ model });
assert.equal(show.details.family, 'llama');
assert.ok(show.capabilities.includes('completion'));
assert.equal(typeof show.model_info['llama.context_length'], 'number');

const v = await client.version();
assert.equal(typeof v.version, 'string');

const emb = await client.embed({ model, input: ['Love is', 'A man walks into a bar'] });
assert.equal(emb.embeddings.length, 2);
assert.ok(emb.embeddings[0].length > 0);
assert.notDeepEqual(emb.embeddings[0], emb.embeddings[1]);

// The older embeddings call: one prompt, the vector not scaled to unit
// length; scaled, it is embed's.
const old = await client.embeddings({ model, prompt: 'Love is' });
assert.equal(old.embedding.length, emb.embeddings[0].length);
const norm = Math.hypot(...old.embedding);
assert.ok(Math.abs(norm - 1) > 1e-3, `the older vector is scaled: norm ${norm}`);
old.embedding.forEach((x, j) => assert.ok(Math.abs(x / norm - emb.embeddings[0][j]) < 1e-5, `component ${j}`));
