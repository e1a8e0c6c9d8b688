// Anthropic's model endpoints through the SDK: the list (one page) and
// one model, as the SDK reads them.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const page = await client.models.list();
const m = page.data.find((x) => x.id === model);
assert.ok(m, `${model} not in ${JSON.stringify(page.data)}`);
assert.equal(m.type, 'model');
assert.equal(m.display_name, model);
assert.ok(!Number.isNaN(Date.parse(m.created_at)), `created_at ${m.created_at}`);
assert.equal(page.has_more, false);

const one = await client.models.retrieve(model);
assert.equal(one.id, model);
assert.equal(one.type, 'model');
await assert.rejects(client.models.retrieve('no-such-model'), (err) => err.status === 404);
