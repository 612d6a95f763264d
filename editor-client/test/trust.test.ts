/** Restricted Mode and safe start-up: nothing a cloned repository chose runs, and nothing of it is imported. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { PROBE_ARGS, SERVER_ARGS, interpreterCandidates, isInside, serverLaunch } from "../src/interpreter";

test("in an untrusted workspace the environment's interpreter is ignored: only the PATH's Python", () => {
  assert.deepEqual(
    interpreterCandidates({ pythonExtension: "/w/.venv/bin/python", platform: "linux", workspaceFolder: "/w", trusted: false }),
    [{ command: "python3", source: "default" }],
  );
  // trusted: the environment's interpreter comes first (guard-off check of the line above)
  assert.equal(
    interpreterCandidates({ pythonExtension: "/w/.venv/bin/python", platform: "linux", workspaceFolder: "/w", trusted: true })[0].command,
    "/w/.venv/bin/python",
  );
});

test("in an untrusted workspace a setting that points into the workspace is not run; the user's own is", () => {
  for (const setting of ["${workspaceFolder}/.venv/bin/python", "/w/tools/python", ".venv/bin/python"]) {
    assert.deepEqual(interpreterCandidates({ setting, platform: "linux", workspaceFolder: "/w", trusted: false }), [
      { command: "python3", source: "default" },
    ], setting);
    assert.equal(interpreterCandidates({ setting, platform: "linux", workspaceFolder: "/w", trusted: true })[0].source, "setting");
  }
  assert.deepEqual(interpreterCandidates({ setting: "/opt/py/bin/python", platform: "linux", workspaceFolder: "/w", trusted: false }), [
    { command: "/opt/py/bin/python", source: "setting" },
  ]);
});

test("the server and the probe run with -P, PYTHONSAFEPATH=1, from a folder that is not the workspace", () => {
  assert.equal(SERVER_ARGS[0], "-P");
  assert.deepEqual(SERVER_ARGS.slice(1), ["-m", "ksearch_server"]);
  assert.equal(PROBE_ARGS[0], "-P");
  const l = serverLaunch("/usr/bin/python3", "/home/me", { PATH: "/usr/bin", PYTHONSAFEPATH: undefined }, "/w");
  assert.equal(l.options.cwd, "/home/me");
  assert.equal(l.options.env.PYTHONSAFEPATH, "1");
  assert.deepEqual(l.args, SERVER_ARGS);
  assert.throws(() => serverLaunch("/usr/bin/python3", "/w/sub", {}, "/w"), /inside the workspace/);
  assert.ok(isInside("/w/a", "/w") && isInside("/w", "/w/") && !isInside("/wx", "/w") && !isInside("/a", undefined));
});

test("every setting that chooses a program, an endpoint, a model, a proposer, a backend, a cluster or a store is restricted", () => {
  const pkg = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8"));
  const restricted: string[] = pkg.capabilities.untrustedWorkspaces.restrictedConfigurations;
  for (const key of ["interpreter", "openaiBaseUrl", "proposer", "model", "cluster", "storePath", "backend"]) {
    assert.ok(restricted.includes(`ksearch.${key}`), `ksearch.${key} is not restricted`);
  }
  const props = Object.keys(pkg.contributes.configuration.properties ?? pkg.contributes.configuration[0].properties);
  for (const key of restricted) {
    assert.ok(props.includes(key), `${key} is restricted but not contributed`);
  }
});
