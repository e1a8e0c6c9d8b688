// An agent on the Responses API (the SDK's default model) with a strict
// function tool under auto: the node takes it and the agent's final
// output is the model's prose.
import assert from 'node:assert/strict';
import { Agent, OpenAIResponsesModel, run } from '@openai/agents';
import { client, model, sent, ran, pick, assertStrictTool } from '../lib.mjs';

const agent = new Agent({
  name: 'fortunes',
  instructions: 'Answer.',
  model: new OpenAIResponsesModel(client, model),
  tools: [pick],
  modelSettings: { store: false }, // no max_output_tokens: a reply cut short is response.incomplete, an error to the SDK
});
const result = await run(agent, 'Tell me a fortune.', { maxTurns: 2 });
assert.equal(typeof result.finalOutput, 'string');
assert.ok(result.finalOutput.length > 0, 'a prose answer');
assert.equal(ran.length, 0);
assert.equal(sent.length, 1);
assert.match(sent[0].url, /\/responses$/);
assertStrictTool(sent[0].body);
