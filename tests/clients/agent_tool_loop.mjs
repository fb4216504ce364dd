// An agent's tool loop against `deltaserve serve` on the bundled model, driven by the official
// `openai` npm package, with ajv checking every JSON the server produced against its schema:
//   1. tools declared, tool_choice naming a function: the call comes back as tool_calls (ids,
//      the name, arguments that parse and validate), finish_reason "tool_calls"; streamed, the
//      delta.tool_calls pieces assemble to the same call;
//   2. the tool's result goes back as a "tool" message and the next turn answers;
//   3. tool_choice "required" picks a declared tool, with valid arguments;
//   4. response_format json_schema: 20 seeds, every output parses and validates; the same
//      requests unconstrained mostly do not (the bundled model never learned JSON);
//   5. response_format json_object gives an object; an unsupported schema keyword is a 400 that
//      names it.
// Run by tests/cli/agent_tool_loop_test.cpp; by hand:
//   DS_BASE_URL=http://127.0.0.1:8000 DS_MODEL=deltacoder node tests/clients/agent_tool_loop.mjs
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';

const baseURL = (process.env.DS_BASE_URL ?? 'http://127.0.0.1:8000') + '/v1';
const model = process.env.DS_MODEL ?? 'deltacoder';
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false });

const tools = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file of the repository',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', minLength: 1, maxLength: 40 },
          start_line: { type: 'integer' },
          mode: { type: 'string', enum: ['text', 'hex'] },
        },
        required: ['path', 'mode'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'run_tests',
      description: 'Run the test suite',
      parameters: {
        type: 'object',
        properties: {
          filter: { type: 'string', maxLength: 30 },
          jobs: { type: 'integer' },
          verbose: { type: 'boolean' },
        },
        required: ['filter'],
        additionalProperties: false,
      },
    },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function checkCall(call, name) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]+$/);
  if (name) assert.equal(call.function.name, name);
  const validate = validators[call.function.name];
  assert.ok(validate, `the call names a declared tool: ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  assert.ok(validate(args), `arguments ${call.function.arguments} validate: ${ajv.errorsText(validate.errors)}`);
  return args;
}

// A streamed response, assembled as an agent SDK does it.
async function streamed(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let content = '';
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    for (const d of choice.delta.tool_calls ?? []) {
      if (!calls[d.index]) {
        assert.ok(d.id && d.function?.name, 'a call\'s first delta has its id and name');
        calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } };
      }
      calls[d.index].function.arguments += d.function?.arguments ?? '';
    }
    finish = choice.finish_reason ?? finish;
  }
  return { content, finish, calls };
}

const system = { role: 'developer', content: 'You are a coding agent. Use the tools.' };
const user = { role: 'user', content: 'Open the README and tell me how to run the tests.' };
const named = { type: 'function', function: { name: 'read_file' } };
const first = { model, messages: [system, user], tools, tool_choice: named, max_tokens: 200, seed: 7 };

// 1. The forced call, whole and streamed: the same seed gives the same call.
const whole = await client.chat.completions.create(first);
const msg = whole.choices[0].message;
assert.equal(whole.choices[0].finish_reason, 'tool_calls');
assert.equal(msg.content, null);
assert.equal(msg.tool_calls.length, 1);
const args = checkCall(msg.tool_calls[0], 'read_file');
const st = await streamed(first);
assert.equal(st.finish, 'tool_calls');
assert.equal(st.content, '');
assert.equal(st.calls.length, 1);
checkCall(st.calls[0], 'read_file');
assert.equal(st.calls[0].function.arguments, msg.tool_calls[0].function.arguments);

// 2. The tool's result goes back; the next turn answers (tool_choice auto).
for (const stream of [false, true]) {
  const messages = [system, user, msg, {
    role: 'tool', tool_call_id: msg.tool_calls[0].id,
    content: JSON.stringify({ path: args.path, text: 'Run scripts/test to build and test.' }),
  }];
  const next = { model, messages, tools, max_tokens: 48, seed: 11 };
  if (stream) {
    const r = await streamed(next);
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.finish), `finish ${r.finish}`);
    assert.ok(r.content.length > 0 || r.calls.length > 0, 'the next turn answers');
    for (const c of r.calls) checkCall(c);
  } else {
    const r = await client.chat.completions.create(next);
    const m = r.choices[0].message;
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    assert.ok((m.content ?? '').length > 0 || (m.tool_calls ?? []).length > 0, 'the next turn answers');
    for (const c of m.tool_calls ?? []) checkCall(c);
  }
}

// 3. "required": any declared tool, valid arguments; one call without parallel calls.
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({
    model, messages: [user], tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, seed,
  });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  checkCall(r.choices[0].message.tool_calls[0]);
}

// 4. Structured output for 20 seeds; the same requests without the constraint.
const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 24 },
    language: { type: 'string', enum: ['c++', 'python', 'rust'] },
    stars: { type: 'integer' },
    tags: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 3 },
    license: { anyOf: [{ type: 'string', pattern: '^[A-Z][A-Za-z0-9-]{1,10}$' }, { type: 'null' }] },
  },
  required: ['name', 'language', 'stars', 'tags', 'license'],
  additionalProperties: false,
};
const validate = ajv.compile(schema);
const ask = [{ role: 'user', content: 'Describe this repository as JSON.' }];
let free_valid = 0;
for (let seed = 0; seed < 20; ++seed) {
  const r = await client.chat.completions.create({
    model, messages: ask, max_tokens: 300, seed,
    response_format: { type: 'json_schema', json_schema: { name: 'repo', strict: true, schema } },
  });
  const text = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: the document ended: ${text}`);
  const doc = JSON.parse(text);
  assert.ok(validate(doc), `seed ${seed}: ${text}: ${ajv.errorsText(validate.errors)}`);
  const free = await client.chat.completions.create({ model, messages: ask, max_tokens: 120, seed });
  try {
    if (validate(JSON.parse(free.choices[0].message.content))) ++free_valid;
  } catch {}
}
assert.ok(free_valid < 20, 'unconstrained, the bundled model does not write this JSON by itself');
console.log(`json_schema: 20/20 valid constrained, ${free_valid}/20 unconstrained`);

// 5. json_object, and a schema keyword the compiler does not support.
const obj = await client.chat.completions.create({
  model, messages: ask, max_tokens: 1000, seed: 4, response_format: { type: 'json_object' },
});
// Any object's strings are unbounded; this seed closes its object within a few tokens.
assert.equal(obj.choices[0].finish_reason, 'stop', obj.choices[0].message.content);
const parsed = JSON.parse(obj.choices[0].message.content);
assert.ok(parsed && typeof parsed === 'object' && !Array.isArray(parsed));
await assert.rejects(
  client.chat.completions.create({
    model, messages: ask, max_tokens: 20,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: {} } } },
  }),
  (e) => e.status === 400 && /patternProperties/.test(e.message),
);

console.log('agent tool loop: ok');
