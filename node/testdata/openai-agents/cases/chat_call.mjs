// An agent on chat completions made to call its strict tool
// (toolChoice required): the node's grammar holds the call's arguments
// to the zod schema, and the SDK parses the call and runs the tool with
// them. The agent stops at the tool's result (stop_on_first_tool): the
// built-in model's 256-token context has no room for a second turn
// carrying the call and its result.
import assert from 'node:assert/strict';
import { Agent, OpenAIChatCompletionsModel, run } from '@openai/agents';
import { client, model, sent, ran, pick, assertStrictTool } from '../lib.mjs';

const agent = new Agent({
  name: 'fortunes',
  instructions: '',
  model: new OpenAIChatCompletionsModel(client, model),
  tools: [pick],
  toolUseBehavior: 'stop_on_first_tool',
  modelSettings: {
    toolChoice: 'required',
    parallelToolCalls: false,
    // No tabs or newlines (token ids of the built-in model's byte tokens),
    // which it would rather write between the arguments' JSON tokens than
    // finish them; sent as the SDK sends any extra field.
    providerData: { logit_bias: { 12: -100, 13: -100 } },
  },
});
const result = await run(agent, '?', { maxTurns: 2 });
assert.equal(ran.length, 1, `the tool ran once: ${JSON.stringify(ran)}`);
assert.ok(['O', 'P'].includes(ran[0]));
assert.equal(sent.length, 1);
assertStrictTool(sent[0].body);
assert.equal(sent[0].body.tool_choice, 'required');
assert.equal(result.finalOutput, `picked ${ran[0]}`);
