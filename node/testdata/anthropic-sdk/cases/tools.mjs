// A tool round trip through the SDK: tool_choice names the tool, so the
// built-in model calls it (its input held to the schema); the SDK reads
// the tool_use block, streamed too (input_json_delta pieces); the call
// and its tool_result go back, and the model answers in text.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

// The built-in model's context is 256 tokens: one small tool.
const tools = [{
  name: 'w',
  input_schema: { type: 'object', properties: { c: { enum: ['O', 'P'] } }, required: ['c'], additionalProperties: false },
}];
const messages = [{ role: 'user', content: '?' }];

const first = await client.messages.create({ model, max_tokens: 100, messages, tools, tool_choice: { type: 'tool', name: 'w', disable_parallel_tool_use: true } });
assert.equal(first.stop_reason, 'tool_use');
const uses = first.content.filter((b) => b.type === 'tool_use');
assert.equal(uses.length, 1);
const use = uses[0];
assert.equal(use.name, 'w');
assert.ok(['O', 'P'].includes(use.input.c), `input ${JSON.stringify(use.input)}`);

// Streamed, the SDK assembles the same input from the deltas.
const streamed = await client.messages.stream({ model, max_tokens: 100, messages, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true } }).finalMessage();
const suse = streamed.content.find((b) => b.type === 'tool_use');
assert.ok(suse, `no tool_use in ${JSON.stringify(streamed.content)}`);
assert.deepEqual(suse.input, use.input);

messages.push({ role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '-3 C' }] });
const second = await client.messages.create({ model, max_tokens: 8, messages, tools, tool_choice: { type: 'none' } });
assert.ok(['end_turn', 'max_tokens'].includes(second.stop_reason), `stop_reason ${second.stop_reason}`);
assert.ok(second.content.every((b) => b.type === 'text'));
assert.ok(second.usage.energy.envelope_hex, 'no receipt');

// A tool_result for a call that was never made is refused, in Anthropic's error shape.
await assert.rejects(
  client.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'x' }] }] }),
  (err) => err.status === 400 && err.error?.error?.type === 'invalid_request_error' && /answers no tool_use/.test(err.message),
);
