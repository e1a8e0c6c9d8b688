// The legacy completions logprobs: parallel lists the SDK hands through.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const prompt = 'Once upon a time';
const res = await client.completions.create({ model, prompt, max_tokens: 6, logprobs: 2 });
const lp = res.choices[0].logprobs;
assert.equal(lp.tokens.join(''), res.choices[0].text);
assert.equal(lp.token_logprobs.length, lp.tokens.length);
assert.equal(lp.text_offset[0], prompt.length);
lp.top_logprobs.forEach((alts, i) => {
  assert.ok(Object.keys(alts).length >= 1 && Object.keys(alts).length <= 3);
  assert.equal(alts[lp.tokens[i]], lp.token_logprobs[i]);
});
