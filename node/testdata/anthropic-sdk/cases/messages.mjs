// A Messages request through the SDK: the answer's text block, stop
// reason and usage (with the receipt), the token count of the same
// prompt, a stop sequence named, and a prefill continued.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const messages = [{ role: 'user', content: 'A man walks into a bar' }];
const msg = await client.messages.create({ model, max_tokens: 12, messages });
assert.equal(msg.type, 'message');
assert.equal(msg.role, 'assistant');
assert.equal(msg.model, model);
assert.match(msg.id, /^msg_/);
assert.equal(msg.content.length, 1);
assert.equal(msg.content[0].type, 'text');
const text = msg.content[0].text;
assert.ok(text.length > 0);
assert.equal(msg.stop_reason, 'max_tokens');
assert.equal(msg.stop_sequence, null);
assert.equal(msg.usage.output_tokens, 12);
assert.ok(msg.usage.energy.envelope_hex, 'no receipt');

const count = await client.messages.countTokens({ model, messages });
assert.equal(count.input_tokens, msg.usage.input_tokens);

// A system prompt changes the prompt, and is counted.
const withSystem = await client.messages.countTokens({ model, system: [{ type: 'text', text: 'Be brief.' }], messages });
assert.ok(withSystem.input_tokens > count.input_tokens, `${withSystem.input_tokens} <= ${count.input_tokens}`);

// The answer's second word as a stop sequence: the text before it, and which one.
const word = text.slice(1).indexOf(' ') + 1;
const stop = text.slice(word, word + 2);
const stopped = await client.messages.create({ model, max_tokens: 12, messages, stop_sequences: ['zzz', stop] });
assert.equal(stopped.stop_reason, 'stop_sequence');
assert.equal(stopped.stop_sequence, stop);
assert.equal(stopped.content[0].text, text.slice(0, text.indexOf(stop)));

// A prefill: the reply continues the assistant's first word, without repeating it.
const prefill = text.slice(0, word);
const continued = await client.messages.create({ model, max_tokens: 6, messages: [...messages, { role: 'assistant', content: prefill }] });
const cont = continued.content[0].text;
assert.ok(text.startsWith(prefill + cont) || (prefill + cont).startsWith(text), `${JSON.stringify(prefill)} + ${JSON.stringify(cont)} vs ${JSON.stringify(text)}`);
