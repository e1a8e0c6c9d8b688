// An agent with an output type (a zod schema) and a tool, on chat
// completions: the SDK sends response_format and the tool together, and
// the node holds the reply to either content meeting the schema or a
// call; the fortunes model answers with content, which the SDK parses
// into the agent's final output.
import assert from 'node:assert/strict';
import { Agent, OpenAIChatCompletionsModel, run } from '@openai/agents';
import { z } from 'zod';
import { client, model, sent, ran, pick, assertStrictTool } from '../lib.mjs';

const agent = new Agent({
  name: 'fortunes',
  instructions: '',
  model: new OpenAIChatCompletionsModel(client, model),
  tools: [pick],
  outputType: z.object({ mood: z.enum(['glad', 'sad']) }),
  modelSettings: { maxTokens: 40, parallelToolCalls: false, providerData: { logit_bias: { 12: -100, 13: -100 } } },
});
const result = await run(agent, '?', { maxTurns: 2 });
assert.equal(sent.length, 1, JSON.stringify(result.rawResponses?.[0]?.output));
assertStrictTool(sent[0].body);
assert.equal(sent[0].body.response_format?.type, 'json_schema');
assert.equal(ran.length, 0);
assert.ok(['glad', 'sad'].includes(result.finalOutput?.mood), JSON.stringify(result.finalOutput));
