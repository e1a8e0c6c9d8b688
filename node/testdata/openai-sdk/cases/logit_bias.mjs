// logit_bias through the SDK: banning the greedy answer's first token
// changes how the answer starts.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const ask = (extra) => client.completions.create({ model, prompt: 'A man walks into a bar', max_tokens: 8, ...extra });
const greedy = await ask({});
assert.ok(greedy.choices[0].text.startsWith(','), `the greedy answer ${JSON.stringify(greedy.choices[0].text)}`);
// 29892 is "," in the built-in model's vocabulary.
const banned = await ask({ logit_bias: { '29892': -100 } });
assert.ok(!banned.choices[0].text.startsWith(','), `with "," banned: ${JSON.stringify(banned.choices[0].text)}`);
assert.notEqual(banned.usage.energy.receipt.request_id, greedy.usage.energy.receipt.request_id, 'the bias is not in the request id');
