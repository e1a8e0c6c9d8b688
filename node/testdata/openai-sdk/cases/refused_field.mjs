// A field meshnode does not honour comes back as the SDK's 400 error,
// naming it.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { client, model } from '../lib.mjs';

await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], store: true }),
  (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.param, 'store');
    return true;
  },
);
