// Shared by the cases: the Agents SDK pointed at the node under test
// (node/sdk_test.go sets MESHNODE_BASE_URL and MESHNODE_MODEL), with the
// request bodies it sends recorded, and a function tool as the SDK makes
// them by default (strict: its arguments held to the zod schema).
import OpenAI from 'openai';
import { setTracingDisabled, tool } from '@openai/agents';
import { z } from 'zod';
import assert from 'node:assert/strict';

setTracingDisabled(true); // the traces would go to OpenAI's servers

export const model = process.env.MESHNODE_MODEL;
export const sent = []; // each request body, parsed
export const client = new OpenAI({
  baseURL: process.env.MESHNODE_BASE_URL,
  apiKey: 'unused', // the node under test has no API key
  maxRetries: 0,
  timeout: 60_000,
  fetch: async (url, init) => {
    if (init?.body) sent.push({ url: String(url), body: JSON.parse(init.body) });
    return fetch(url, init);
  },
});

// ran holds the arguments each call of the tool ran with.
export const ran = [];
export const pick = tool({
  name: 'pick',
  description: 'Pick a side.',
  parameters: z.object({ side: z.enum(['O', 'P']) }),
  execute: async ({ side }) => {
    ran.push(side);
    return `picked ${side}`;
  },
});

// strictTools asserts that a request body's tools are the SDK's strict
// ones, in the chat completions or the Responses API's shape.
export function assertStrictTool(body) {
  assert.equal(body.tools?.length, 1, JSON.stringify(body));
  const t = body.tools[0];
  const strict = t.function ? t.function.strict : t.strict;
  assert.equal(strict, true, `the SDK's tool is strict: ${JSON.stringify(t)}`);
}
