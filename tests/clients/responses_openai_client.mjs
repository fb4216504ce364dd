// Drives /v1/responses with the official `openai` npm package: a response whole, streamed by
// create({stream: true}) and by the responses.stream() helper, a forced function call whose output
// goes back as function_call_output (continuing by previous_response_id, and sent whole), a
// json_schema text format, retrieve and delete, and a refused continuation. Run by
// tests/server/responses_api_test.cpp (ctest); by hand, against a running `deltaserve serve`:
//   DS_BASE_URL=http://127.0.0.1:8000 DS_MODEL=name node tests/clients/responses_openai_client.mjs
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';

const baseURL = (process.env.DS_BASE_URL ?? 'http://127.0.0.1:8000') + '/v1';
const model = process.env.DS_MODEL ?? 'default';
const client = new OpenAI({ baseURL, apiKey: process.env.DS_API_KEY ?? 'unused', maxRetries: 0, timeout: 120000 });

const ask = { model, instructions: 'Be brief.', input: 'Hello from the openai client!', max_output_tokens: 8, temperature: 0 };

const whole = await client.responses.create(ask);
assert.equal(whole.object, 'response');
assert.match(whole.id, /^resp_/);
assert.equal(whole.model, model);
assert.equal(whole.status, 'incomplete');
assert.equal(whole.incomplete_details.reason, 'max_output_tokens');
assert.equal(whole.instructions, 'Be brief.');
assert.equal(whole.output.length, 1);
assert.equal(whole.output[0].type, 'message');
assert.equal(typeof whole.output_text, 'string');
assert.ok(whole.output_text.length > 0);
assert.equal(whole.usage.output_tokens, 8);
assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + 8);
assert.equal(typeof whole.usage.input_tokens_details.cached_tokens, 'number');

// create({stream: true}): the events in order, numbered.
const events = [];
for await (const e of await client.responses.create({ ...ask, stream: true })) events.push(e);
events.forEach((e, i) => assert.equal(e.sequence_number, i));
const types = events.map((e) => e.type);
assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                     'response.content_part.added']);
assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done',
                                   'response.output_item.done', 'response.incomplete']);
const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
assert.equal(deltas, whole.output_text, 'streamed greedy text equals the whole one');
assert.equal(events.at(-1).response.usage.output_tokens, 8);

// The responses.stream() helper accumulates the same response.
const helper = client.responses.stream(ask);
let snapshot = '';
helper.on('response.output_text.delta', (e) => { snapshot = e.snapshot; });
const final = await helper.finalResponse();
assert.equal(final.output_text, whole.output_text);
assert.equal(snapshot, whole.output_text);
assert.equal(final.status, 'incomplete');

// A forced call, its result sent back.
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
                 parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 },
                                                             unit: { enum: ['celsius', 'fahrenheit'] } },
                               required: ['city', 'unit'], additionalProperties: false } },
               { type: 'web_search' }];
const question = [{ role: 'user', content: 'Weather in Paris?' }];
const called = await client.responses.create({ model, input: question, tools, temperature: 0, max_output_tokens: 200,
                                               tool_choice: { type: 'function', name: 'get_weather' } });
assert.equal(called.status, 'completed');
const call = called.output.find((o) => o.type === 'function_call');
assert.ok(call, JSON.stringify(called.output));
assert.equal(call.name, 'get_weather');
assert.equal(call.status, 'completed');
assert.ok(['celsius', 'fahrenheit'].includes(JSON.parse(call.arguments).unit));

const streamedCall = client.responses.stream({ model, input: question, tools, temperature: 0, max_output_tokens: 200,
                                               tool_choice: { type: 'function', name: 'get_weather' } });
let argsSnapshot = '';
streamedCall.on('response.function_call_arguments.delta', (e) => { argsSnapshot = e.snapshot; });
const streamedFinal = await streamedCall.finalResponse();
assert.equal(argsSnapshot, call.arguments);
assert.equal(streamedFinal.output.find((o) => o.type === 'function_call').arguments, call.arguments);

const result = { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 C' };
const next = { model, tools, temperature: 0, max_output_tokens: 6 };
const continued = await client.responses.create({ ...next, previous_response_id: called.id, input: [result] });
const resent = await client.responses.create({ ...next, input: [...question, ...called.output, result] });
assert.equal(continued.previous_response_id, called.id);
assert.equal(continued.usage.input_tokens, resent.usage.input_tokens, 'a continuation runs the whole conversation');
assert.equal(continued.output_text, resent.output_text);

// json_schema through the grammar.
const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 8 }, temp: { type: 'integer' } },
                 required: ['city', 'temp'], additionalProperties: false };
const structured = await client.responses.create({ model, input: 'Weather?', temperature: 0, max_output_tokens: 200,
                                                   text: { format: { type: 'json_schema', name: 'w', schema, strict: true } } });
assert.equal(structured.status, 'completed');
const parsed = JSON.parse(structured.output_text);
assert.equal(typeof parsed.city, 'string');
assert.ok(Number.isInteger(parsed.temp));
// 20 samples at temperature 1 (each request its own random stream): every one parses and
// validates against the schema.
const validate = new Ajv({ strict: false }).compile(schema);
for (let i = 0; i < 20; ++i) {
  const r = await client.responses.create({ model, input: `Weather in city ${i}?`, temperature: 1, max_output_tokens: 200,
                                            text: { format: { type: 'json_schema', name: 'w', schema, strict: true } } });
  assert.equal(r.status, 'completed', JSON.stringify(r));
  const v = JSON.parse(r.output_text);
  assert.ok(validate(v), `${r.output_text}: ${JSON.stringify(validate.errors)}`);
}

// Stored responses: retrieve, delete, and a continuation of a deleted one refused.
const got = await client.responses.retrieve(called.id);
assert.equal(got.id, called.id);
assert.deepEqual(got.output, called.output);
await client.responses.delete(called.id);
await assert.rejects(client.responses.retrieve(called.id), (e) => e.status === 404);
await assert.rejects(client.responses.create({ model, previous_response_id: called.id, input: 'x' }),
                     (e) => e.status === 404 && e.param === 'previous_response_id');
const unstored = await client.responses.create({ ...ask, store: false });
await assert.rejects(client.responses.retrieve(unstored.id), (e) => e.status === 404);

console.log('responses client: ok');
