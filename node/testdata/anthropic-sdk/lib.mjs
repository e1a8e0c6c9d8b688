// Shared by the cases: a client for the node under test
// (node/sdk_test.go sets MESHNODE_BASE_URL and MESHNODE_MODEL).
import Anthropic from '@anthropic-ai/sdk';

export const model = process.env.MESHNODE_MODEL;
export const client = new Anthropic({
  baseURL: process.env.MESHNODE_BASE_URL, // the node's root: the SDK adds /v1/messages
  apiKey: 'unused', // the node under test has no API key
  maxRetries: 0,
  timeout: 60_000,
});
