// Drives a running `deltaserve serve` with the official `openai` npm package: a chat
// completion, a streamed chat with usage, a completion with a token-id prompt, the models list,
// and a refused request. Run by tests/server/openai_client_test.cpp (ctest); by hand:
//   DS_BASE_URL=http://127.0.0.1:8000 DS_MODEL=name node tests/clients/openai_client.mjs
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = (process.env.DS_BASE_URL ?? 'http://127.0.0.1:8000') + '/v1';
const model = process.env.DS_MODEL ?? 'default';
const client = new OpenAI({ baseURL, apiKey: process.env.DS_API_KEY ?? 'unused', maxRetries: 0, timeout: 120000 });
const messages = [{ role: 'user', content: 'Hello from the openai client!' }];

// ignore_eos is a server extension (vLLM's name); the client passes unknown fields through.
const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, ignore_eos: true });
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.model, model);
assert.equal(chat.choices.length, 1);
assert.equal(chat.choices[0].message.role, 'assistant');
assert.equal(typeof chat.choices[0].message.content, 'string');
assert.equal(chat.choices[0].finish_reason, 'length');
assert.equal(chat.usage.completion_tokens, 8);
assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + 8);

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
  stream_options: { include_usage: true },
});
let text = '';
let usage = null;
let finish = null;
for await (const chunk of stream) {
  assert.equal(chunk.object, 'chat.completion.chunk');
  if (chunk.choices.length) {
    text += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(finish, 'length');
assert.equal(text, chat.choices[0].message.content, 'streamed greedy text equals the non-streamed one');
assert.deepEqual(usage, chat.usage);

const cmpl = await client.completions.create({ model, prompt: [1, 2, 3, 4], max_tokens: 5, temperature: 0, ignore_eos: true });
assert.equal(cmpl.object, 'text_completion');
assert.equal(typeof cmpl.choices[0].text, 'string');
assert.equal(cmpl.usage.prompt_tokens, 4);
assert.equal(cmpl.usage.completion_tokens, 5);

const models = [];
for await (const m of client.models.list()) models.push(m.id);
assert.ok(models.includes(model), `models list ${models} includes ${model}`);

await assert.rejects(
  client.chat.completions.create({ model, messages, temperature: -1 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message));
await assert.rejects(
  client.chat.completions.create({ model: 'no-such-model', messages }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404);

console.log('openai client: ok');
