// Predicted outputs, as the SDK sends them: a chat given its own answer
// as the prediction answers the same, and usage's
// completion_tokens_details counts the predicted tokens that stood.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const ask = { model, messages: [{ role: 'user', content: 'A man walks into a bar' }], max_tokens: 24 };
const plain = await client.chat.completions.create(ask);
const answer = plain.choices[0].message.content;
const res = await client.chat.completions.create({ ...ask, prediction: { type: 'content', content: answer } });
assert.equal(res.choices[0].message.content, answer);
const d = res.usage.completion_tokens_details;
assert.ok(d && d.accepted_prediction_tokens > 0, `completion_tokens_details ${JSON.stringify(d)}`);
assert.equal(typeof d.rejected_prediction_tokens, 'number');
