// An agent on the Responses API made to call its strict tool
// (toolChoice required): the call is a function_call item whose
// arguments the node's grammar held to the zod schema, and the SDK runs
// the tool with them (stopping at its result, as chat_call.mjs).
import assert from 'node:assert/strict';
import { Agent, OpenAIResponsesModel, run } from '@openai/agents';
import { client, model, sent, ran, pick, assertStrictTool } from '../lib.mjs';

const agent = new Agent({
  name: 'fortunes',
  instructions: '',
  model: new OpenAIResponsesModel(client, model),
  tools: [pick],
  toolUseBehavior: 'stop_on_first_tool',
  modelSettings: { toolChoice: 'required', parallelToolCalls: false, store: false },
});
const result = await run(agent, '?', { maxTurns: 2 });
assert.equal(ran.length, 1, `the tool ran once: ${JSON.stringify(result.rawResponses[0]?.output)}`);
assert.ok(['O', 'P'].includes(ran[0]));
assert.equal(sent.length, 1);
assertStrictTool(sent[0].body);
assert.equal(sent[0].body.tool_choice, 'required');
assert.equal(result.finalOutput, `picked ${ran[0]}`);
