/** Settings → initializationOptions; the key is passed but never described or logged. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { DOCUMENT_SELECTOR, KERNEL_EXTENSIONS, LANGUAGES } from "../src/documents";
import { DEFAULTS, RESTART_KEYS, describeOptions, initializationOptions, readSettings, redact } from "../src/settings";

const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8"));

test("settings are read with defaults for missing or invalid values", () => {
  const values: Record<string, unknown> = { proposer: "gemini", "budget.evaluations": 0, concurrency: 3, backend: "", model: " gemini-2.5-pro " };
  const s = readSettings((k) => values[k]);
  assert.equal(s.proposer, "gemini");
  assert.equal(s.model, "gemini-2.5-pro");
  assert.equal(s.budget.evaluations, DEFAULTS.budget.evaluations);
  assert.equal(s.concurrency, 3);
  assert.equal(s.backend, "auto");
  assert.equal(readSettings((k) => (k === "proposer" ? "claude" : undefined)).proposer, "offline");
  assert.equal(readSettings((k) => (k === "cluster" ? " ray://10.0.0.5:10001 " : undefined)).cluster, "ray://10.0.0.5:10001");
  assert.equal(readSettings(() => undefined).cluster, "");
});

test("initializationOptions carry the settings and the key, the description never the key", () => {
  const opts = initializationOptions(readSettings(() => undefined), "AIzaSECRETKEY123");
  assert.equal(opts.geminiApiKey, "AIzaSECRETKEY123");
  assert.equal("interpreter" in opts.ksearch, false);
  assert.equal(opts.ksearch.budget.evaluations, 24);
  const line = describeOptions(opts);
  assert.doesNotMatch(line, /SECRETKEY/);
  assert.match(line, /geminiApiKey=set/);
  assert.equal(initializationOptions(readSettings(() => undefined), "").geminiApiKey, undefined);
  assert.equal(redact('{"geminiApiKey":"AIzaSECRETKEY123"}', ["AIzaSECRETKEY123", undefined]), '{"geminiApiKey":"***"}');
});

test("every setting the client reads is contributed with a description, defaults agree", () => {
  const props = manifest.contributes.configuration.properties;
  for (const key of RESTART_KEYS) {
    assert.ok(props[key], `${key} is not contributed in package.json`);
    assert.ok(props[key].description || props[key].markdownDescription, `${key} has no description`);
  }
  assert.equal(props["ksearch.budget.evaluations"].default, DEFAULTS.budget.evaluations);
  assert.equal(props["ksearch.openaiBaseUrl"].default, DEFAULTS.openaiBaseUrl);
  assert.deepEqual(props["ksearch.proposer"].enum, ["offline", "gemini", "openai"]);
  assert.ok(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations.includes("ksearch.interpreter"));
  // a workspace must not be able to send the user's kernels to a cluster of its choosing
  assert.ok(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations.includes("ksearch.cluster"));
  assert.equal(props["ksearch.cluster"].default, DEFAULTS.cluster);
});

test("the server is attached to every kernel language, and .cu/.cuh/.metal have a language", () => {
  const contributed: string[] = manifest.contributes.languages.flatMap((l: { extensions: string[] }) => l.extensions);
  for (const ext of KERNEL_EXTENSIONS) {
    assert.ok(contributed.includes(ext), `${ext} has no contributed language`);
  }
  for (const lang of LANGUAGES) {
    assert.ok(manifest.activationEvents.includes(`onLanguage:${lang}`), `no activation on ${lang}`);
    assert.ok(DOCUMENT_SELECTOR.some((f) => f.language === lang && f.scheme === "file"));
  }
  assert.equal(DOCUMENT_SELECTOR.find((f) => f.language === "cpp")?.pattern, "**/*.{cu,cuh,metal}");
});
