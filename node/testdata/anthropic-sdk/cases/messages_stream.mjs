// A streamed Messages request through the SDK's MessageStream: the text
// events make the whole answer's text, the final message is what a
// request that does not stream answers, and the message_delta event
// carried the usage with the receipt (the SDK's final message keeps only
// the usage keys it knows, so the receipt is read from the event).
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const params = { model, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'text', text: 'Knock knock' }] }] };
const whole = await client.messages.create(params);

const stream = client.messages.stream(params);
let text = '';
stream.on('text', (delta) => { text += delta; });
let energy;
stream.on('streamEvent', (ev) => { if (ev.type === 'message_delta') energy = ev.usage.energy; });
const final = await stream.finalMessage();
assert.equal(text, whole.content[0].text);
assert.equal(final.content.length, 1);
assert.equal(final.content[0].text, text);
assert.equal(final.stop_reason, whole.stop_reason);
assert.equal(final.usage.input_tokens, whole.usage.input_tokens);
assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
assert.ok(energy?.envelope_hex, 'no receipt in message_delta');
