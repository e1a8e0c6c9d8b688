// A tool round trip through the SDK: tool_choice "required" makes the
// built-in model call the tool (its arguments held to the schema), the
// SDK reads message.tool_calls, the assistant message and the tool's
// result go back, and the model answers in text.
import assert from 'node:assert/strict';
import { client, model } from '../lib.mjs';

// The built-in model's context is 256 tokens: one small tool.
const tools = [{
  type: 'function',
  function: {
    name: 'w',
    parameters: { type: 'object', properties: { c: { enum: ['O', 'P'] } }, required: ['c'], additionalProperties: false },
  },
}];
const messages = [{ role: 'user', content: '?' }];

const first = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', parallel_tool_calls: false });
const choice = first.choices[0];
assert.equal(choice.finish_reason, 'tool_calls');
assert.equal(choice.message.content, null);
assert.equal(choice.message.tool_calls.length, 1);
const call = choice.message.tool_calls[0];
assert.equal(call.type, 'function');
assert.equal(call.function.name, 'w');
assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
assert.ok(['O', 'P'].includes(JSON.parse(call.function.arguments).c), `arguments ${call.function.arguments}`);

messages.push(choice.message, { role: 'tool', tool_call_id: call.id, content: '-3 C' });
const second = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', max_tokens: 8 });
const answer = second.choices[0];
assert.ok(['stop', 'length'].includes(answer.finish_reason), `finish_reason ${answer.finish_reason}`);
assert.equal(answer.message.tool_calls, undefined);
assert.equal(typeof answer.message.content, 'string');
assert.ok(second.usage.energy.envelope_hex, 'no receipt');

// A tool message without the id of the call it answers is refused, naming the field.
await assert.rejects(
  client.chat.completions.create({ model, messages: [...messages.slice(0, 2), { role: 'tool', content: 'x' }], tools }),
  (err) => err.status === 400 && err.param === 'messages[2].tool_call_id',
);
