// An agent on chat completions with a strict function tool (the SDK's
// default) under tool_choice auto: the node takes it, and the fortunes
// model answers in prose, the agent's final output.
import assert from 'node:assert/strict';
import { Agent, OpenAIChatCompletionsModel, run } from '@openai/agents';
import { client, model, sent, ran, pick, assertStrictTool } from '../lib.mjs';

const agent = new Agent({
  name: 'fortunes',
  instructions: 'Answer.',
  model: new OpenAIChatCompletionsModel(client, model),
  tools: [pick],
  modelSettings: { maxTokens: 16 },
});
const result = await run(agent, 'Tell me a fortune.', { maxTurns: 2 });
assert.equal(typeof result.finalOutput, 'string');
assert.ok(result.finalOutput.length > 0, 'a prose answer');
assert.equal(ran.length, 0, 'no call');
assert.equal(sent.length, 1);
assert.match(sent[0].url, /\/chat\/completions$/);
assertStrictTool(sent[0].body);
assert.ok(!sent[0].body.tool_choice || sent[0].body.tool_choice === 'auto', JSON.stringify(sent[0].body.tool_choice));
