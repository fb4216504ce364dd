// Regenerates the "expected" ids in cases.json with the Hugging Face `tokenizers` library, the
// reference the C++ tokenizer is held to (tests/tokenizer/hf_parity_test.cpp).
//
//   cd "$(mktemp -d)" && npm install tokenizers && \
//     NODE_PATH=$PWD/node_modules node /path/to/tests/tokenizer/data/hf_parity/make_expected.js
//
// Each variant rewrites parts of tokenizer.json the same way the C++ test does: a different
// pre_tokenizer, merges written as [left, right] pairs, ignore_merges.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Tokenizer } = require('tokenizers');

function variantJson(base, v) {
  const j = JSON.parse(JSON.stringify(base));
  if (v.pre_tokenizer) j.pre_tokenizer = v.pre_tokenizer;
  if (v.merges_as_pairs) j.model.merges = j.model.merges.map((m) => m.split(' '));
  if (v.ignore_merges) j.model.ignore_merges = true;
  return j;
}

(async () => {
  const dir = __dirname;
  const base = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
  cases.expected = {};
  for (const [name, v] of Object.entries(cases.variants)) {
    const tmp = path.join(os.tmpdir(), `hf_parity_${name}.json`);
    fs.writeFileSync(tmp, JSON.stringify(variantJson(base, v)));
    const tok = Tokenizer.fromFile(tmp);
    const ids = [];
    for (const doc of cases.docs) {
      const enc = await tok.encode(doc, null, { addSpecialTokens: false });
      ids.push(Array.from(enc.getIds()));
    }
    cases.expected[name] = ids;
    fs.unlinkSync(tmp);
  }
  cases.generated_by = 'tokenizers (npm) ' + require('tokenizers/package.json').version;
  // One doc and one id list per line: compact, and a diff shows which case changed.
  const lines = (xs) => xs.map((x) => '  ' + JSON.stringify(x)).join(',\n');
  const text = [
    '{',
    ` "generated_by": ${JSON.stringify(cases.generated_by)},`,
    ` "variants": ${JSON.stringify(cases.variants)},`,
    ' "docs": [',
    lines(cases.docs),
    ' ],',
    ' "expected": {',
    Object.entries(cases.expected).map(([k, v]) => `  ${JSON.stringify(k)}: [\n${lines(v)}\n  ]`).join(',\n'),
    ' }',
    '}',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'cases.json'), text + '\n');
  console.log(`${cases.docs.length} docs x ${Object.keys(cases.variants).length} variants`);
})();
