// Refusals reach the SDK as its typed errors, in Anthropic's error
// shape: a value out of range (400), a model the node does not serve
// (404), an option meshnode does not honour (400, not ignored).
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { client, model } from '../lib.mjs';

const messages = [{ role: 'user', content: 'hi' }];
await assert.rejects(client.messages.create({ model, max_tokens: 4, messages, temperature: 1.5 }), (err) =>
  err instanceof Anthropic.BadRequestError && err.error.type === 'error' && err.error.error.type === 'invalid_request_error' && /temperature/.test(err.message));
await assert.rejects(client.messages.create({ model: 'no-such-model', max_tokens: 4, messages }), (err) =>
  err instanceof Anthropic.NotFoundError && err.error.error.type === 'not_found_error');
await assert.rejects(client.messages.create({ model, max_tokens: 4, messages, thinking: { type: 'enabled', budget_tokens: 1024 } }), (err) =>
  err instanceof Anthropic.BadRequestError && /budget_tokens \(1024\) must be less than max_tokens \(4\)/.test(err.message));
await assert.rejects(client.messages.create({ model, max_tokens: 2048, messages, thinking: { type: 'enabled', budget_tokens: 1024 } }), (err) =>
  err instanceof Anthropic.BadRequestError && /does not reason/.test(err.message));
