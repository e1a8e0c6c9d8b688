// echo with logprobs on a prompt of token ids, as lm-evaluation-harness
// asks for a loglikelihood: the prompt's tokens head the logprobs, the
// first null, then the one generated token.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

// llama.cpp's ids for "A man walks into a bar" (BOS first), and ", and".
const ids = [1, 319, 767, 17042, 2039, 964, 263, 2594, 29892, 322];
const res = await client.completions.create({ model, prompt: [ids], max_tokens: 1, logprobs: 1, echo: true, temperature: 0, seed: 1234 });
const lp = res.choices[0].logprobs;
assert.equal(lp.token_logprobs.length, ids.length + 1);
assert.equal(lp.token_logprobs[0], null);
assert.equal(lp.top_logprobs[0], null);
assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0), `${lp.token_logprobs}`);
assert.ok(res.choices[0].text.startsWith(' A man walks into a bar, and'), JSON.stringify(res.choices[0].text));
