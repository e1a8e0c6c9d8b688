// Streamed tool calls through the SDK's own accumulation
// (ChatCompletionStream): the deltas meshnode sends rebuild exactly the
// calls of the same request answered whole, and every chunk has the shape
// OpenAI streams (index on each tool-call delta; id, type and name on a
// call's first).
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const tools = [{
  type: 'function',
  function: {
    name: 'w',
    parameters: { type: 'object', properties: { c: { enum: ['O', 'P'] } }, required: ['c'], additionalProperties: false },
  },
}];
const request = { model, messages: [{ role: 'user', content: '?' }], tools, tool_choice: 'required', parallel_tool_calls: false };

const whole = await client.chat.completions.create(request);
const stream = client.chat.completions.stream(request);
const seen = new Set();
stream.on('chunk', (chunk) => {
  for (const c of chunk.choices) {
    for (const tc of c.delta.tool_calls ?? []) {
      assert.equal(typeof tc.index, 'number');
      if (!seen.has(tc.index)) {
        seen.add(tc.index);
        assert.ok(tc.id && tc.type === 'function' && tc.function.name, `first delta of call ${tc.index}: ${JSON.stringify(tc)}`);
      } else {
        assert.ok(tc.id === undefined && tc.function.name === undefined, `later delta: ${JSON.stringify(tc)}`);
      }
    }
  }
});
const streamed = await stream.finalChatCompletion();

const got = streamed.choices[0], want = whole.choices[0];
assert.equal(got.finish_reason, 'tool_calls');
assert.equal(got.message.content ?? null, null);
const shape = (calls) => calls.map((c) => [c.type, c.function.name, c.function.arguments]);
assert.deepEqual(shape(got.message.tool_calls), shape(want.message.tool_calls));
assert.ok(got.message.tool_calls.every((c) => /^call_/.test(c.id)));
assert.equal(seen.size, want.message.tool_calls.length);
