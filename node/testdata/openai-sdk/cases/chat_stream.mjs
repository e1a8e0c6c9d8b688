// A streamed chat completion with include_usage: the SDK's stream reader
// takes meshnode's chunks, the text adds up, and the last chunk carries
// the usage with its receipt.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'A man walks into a bar' }],
  max_tokens: 8,
  stream: true,
  stream_options: { include_usage: true },
});
let text = '', finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  assert.equal(chunk.object, 'chat.completion.chunk');
  for (const c of chunk.choices) {
    text += c.delta.content ?? '';
    finish = c.finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
assert.ok(chunks >= 3, `only ${chunks} chunks`);
assert.ok(text.length > 0, 'no text streamed');
assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
assert.ok(usage && usage.completion_tokens > 0 && usage.energy.envelope_hex, 'no usage with a receipt');
