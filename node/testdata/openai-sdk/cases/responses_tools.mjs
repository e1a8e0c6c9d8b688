// A tool round trip on the Responses API through the SDK: tool_choice
// "required" makes the built-in model call the function (its arguments
// held to the schema), the SDK reads the function_call item, the call
// and its function_call_output go back as input, and the model answers
// in text; streamed, the arguments arrive as their delta events.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

const tools = [{
  type: 'function',
  name: 'w',
  parameters: { type: 'object', properties: { c: { enum: ['O', 'P'] } }, required: ['c'], additionalProperties: false },
  strict: false,
}];
const first = await client.responses.create({ model, input: '?', tools, tool_choice: 'required', parallel_tool_calls: false });
const calls = first.output.filter((o) => o.type === 'function_call');
assert.equal(calls.length, 1);
const call = calls[0];
assert.equal(call.name, 'w');
assert.ok(['O', 'P'].includes(JSON.parse(call.arguments).c), `arguments ${call.arguments}`);
assert.ok(call.call_id);

const second = await client.responses.create({
  model, tools, tool_choice: 'none', max_output_tokens: 8,
  input: [{ role: 'user', content: '?' }, call, { type: 'function_call_output', call_id: call.call_id, output: '-3 C' }],
});
assert.equal(second.output.filter((o) => o.type === 'function_call').length, 0);
assert.equal(typeof second.output_text, 'string');
assert.ok(second.usage.energy.envelope_hex, 'no receipt');

const stream = await client.responses.create({ model, input: '?', tools, tool_choice: 'required', parallel_tool_calls: false, stream: true });
let args = '';
let done;
for await (const ev of stream) {
  if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
  if (ev.type === 'response.completed') done = ev.response;
}
assert.equal(args, call.arguments);
assert.equal(done.output.find((o) => o.type === 'function_call').arguments, call.arguments);
