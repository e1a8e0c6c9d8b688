// Ollama's chat and generate through its library: whole and streamed
// answers agree, the done object carries the counts and meshnode's
// receipt, and refusals come back as the library's ResponseError.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const messages = [{ role: 'user', content: 'A man walks into a bar' }];
const whole = await client.chat({ model, messages, options: { num_predict: 10, seed: 1 } });
assert.equal(whole.done, true);
assert.equal(whole.message.role, 'assistant');
assert.ok(whole.message.content.length > 0);
assert.equal(whole.eval_count, 10);
assert.equal(whole.done_reason, 'length');
assert.ok(whole.prompt_eval_count > 0);
assert.ok(whole.energy.envelope_hex, 'no receipt');

let text = '';
let last;
for await (const part of await client.chat({ model, messages, stream: true, options: { num_predict: 10 } })) {
  text += part.message.content;
  last = part;
}
assert.equal(text, whole.message.content);
assert.equal(last.done, true);
assert.ok(last.energy.envelope_hex);

const gen = await client.generate({ model, prompt: 'Love is', raw: true, options: { num_predict: 6 } });
assert.equal(gen.done, true);
assert.equal(typeof gen.response, 'string');
assert.equal(gen.eval_count, 6);

// An option meshnode does not honour is refused, naming it.
await assert.rejects(client.chat({ model, messages, options: { mirostat: 2 } }), (err) =>
  err.name === 'ResponseError' && err.status_code === 400 && /mirostat/.test(err.error));
await assert.rejects(client.chat({ model: 'no-such-model', messages }), (err) =>
  err.name === 'ResponseError' && err.status_code === 404);
