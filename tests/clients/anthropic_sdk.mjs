// The official Anthropic SDK (@anthropic-ai/sdk) against DeltaServe's Messages API:
//   1. messages.create, whole: a message with text, a stop reason, usage whose counts add up;
//   2. messages.stream: the SDK's own accumulator builds the same message the whole call gave;
//   3. a tool loop with tool_choice {type: "any"}: the call comes back as a tool_use block with a
//      parsed input, the tool_result goes back, and the next turn answers; streamed, the SDK
//      assembles the same tool_use from input_json_delta events;
//   4. messages.countTokens equals the prompt the create call reported;
//   5. errors surface as the SDK's typed errors (BadRequestError, NotFoundError) with
//      Anthropic's error body.
// Run by tests/server/anthropic_sdk_test.cpp; by hand:
//   DS_BASE_URL=http://127.0.0.1:8000 DS_MODEL=deltacoder node tests/clients/anthropic_sdk.mjs
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.DS_BASE_URL ?? 'http://127.0.0.1:8000';
const model = process.env.DS_MODEL ?? 'deltacoder';
const client = new Anthropic({ baseURL, apiKey: process.env.DS_API_KEY ?? 'unused', maxRetries: 0, timeout: 120000 });

const system = 'You answer questions about the weather. '.repeat(8);
const tools = [
  {
    name: 'get_weather',
    description: 'Weather in a city',
    input_schema: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
];
const inputTotal = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);

// 1. whole
const ask = { model, max_tokens: 24, temperature: 0, system, messages: [{ role: 'user', content: 'Weather in Paris?' }] };
const whole = await client.messages.create(ask);
assert.equal(whole.type, 'message');
assert.equal(whole.role, 'assistant');
assert.ok(whole.id.startsWith('msg_'));
assert.ok(['end_turn', 'max_tokens'].includes(whole.stop_reason), whole.stop_reason);
assert.ok(whole.content.every((b) => b.type === 'text'));
assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 24);

// 2. streamed through the SDK's accumulator
const stream = client.messages.stream(ask);
let deltas = '';
stream.on('text', (t) => {
  deltas += t;
});
const streamed = await stream.finalMessage();
assert.deepEqual(streamed.content, whole.content);
assert.equal(streamed.stop_reason, whole.stop_reason);
assert.equal(deltas, whole.content.map((b) => b.text).join(''));
assert.equal(streamed.usage.output_tokens, whole.usage.output_tokens);
assert.equal(inputTotal(streamed.usage), inputTotal(whole.usage));
// The second time the system prompt came from the prefix cache.
assert.ok(streamed.usage.cache_read_input_tokens > 0, JSON.stringify(streamed.usage));

// 3. a tool loop with a forced call
const messages = [{ role: 'user', content: 'Weather in Rome?' }];
const forced = { model, max_tokens: 200, temperature: 0, system, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true } };
const first = await client.messages.create({ ...forced, messages });
assert.equal(first.stop_reason, 'tool_use', JSON.stringify(first));
const use = first.content.find((b) => b.type === 'tool_use');
assert.ok(use, JSON.stringify(first.content));
assert.equal(use.name, 'get_weather');
assert.equal(typeof use.input.city, 'string');
assert.ok(['celsius', 'fahrenheit'].includes(use.input.unit));
const firstStreamed = await client.messages.stream({ ...forced, messages }).finalMessage();
assert.deepEqual(firstStreamed.content.find((b) => b.type === 'tool_use').input, use.input);
messages.push({ role: 'assistant', content: first.content });
messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees and sunny' }] });
const answer = await client.messages.create({ model, max_tokens: 16, temperature: 0, system, tools, messages });
assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(answer.stop_reason));
assert.ok(answer.usage.cache_read_input_tokens > 0, JSON.stringify(answer.usage));

// 4. count_tokens
const counted = await client.messages.countTokens({ model, system, tools, messages });
assert.equal(counted.input_tokens, inputTotal(answer.usage));

// 5. errors
await assert.rejects(client.messages.create({ ...ask, model: 'no-such-model' }), (e) => {
  assert.ok(e instanceof Anthropic.NotFoundError, String(e));
  assert.equal(e.error.type, 'error');
  assert.equal(e.error.error.type, 'not_found_error');
  return true;
});
await assert.rejects(client.messages.create({ ...ask, temperature: 3 }), (e) => {
  assert.ok(e instanceof Anthropic.BadRequestError, String(e));
  assert.match(e.error.error.message, /temperature/);
  return true;
});

console.log('anthropic sdk: ok');
