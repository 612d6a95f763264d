/** Interpreter choice: the setting wins alone; else the Python extension's, then python3. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { describeAttempt, interpreterCandidates, noInterpreterMessage, readProbe } from "../src/interpreter";

test("an explicit ksearch.interpreter is the only candidate, with ${workspaceFolder} and ~ expanded", () => {
  assert.deepEqual(
    interpreterCandidates({ setting: " ${workspaceFolder}/.venv/bin/python ", pythonExtension: "/usr/bin/python3.12", platform: "linux", workspaceFolder: "/w" }),
    [{ command: "/w/.venv/bin/python", source: "setting" }],
  );
  assert.deepEqual(interpreterCandidates({ setting: "~/py/bin/python", platform: "darwin", home: "/Users/me" }), [
    { command: "/Users/me/py/bin/python", source: "setting" },
  ]);
});

test("without the setting: the Python extension's interpreter first, then python3 from the PATH", () => {
  assert.deepEqual(interpreterCandidates({ setting: "", pythonExtension: "/venv/bin/python", platform: "linux" }), [
    { command: "/venv/bin/python", source: "python-extension" },
    { command: "python3", source: "default" },
  ]);
  assert.deepEqual(interpreterCandidates({ platform: "linux" }), [{ command: "python3", source: "default" }]);
  assert.deepEqual(interpreterCandidates({ platform: "win32" }), [{ command: "python", source: "default" }]);
  assert.deepEqual(interpreterCandidates({ pythonExtension: "python3", platform: "linux" }), [
    { command: "python3", source: "python-extension" },
  ]);
});

test("the probe's exit code and output tell ok, missing package, missing program and broken apart", () => {
  assert.deepEqual(readProbe({ exitCode: 0, stdout: "/venv/bin/python\n", stderr: "" }), { kind: "ok", executable: "/venv/bin/python" });
  assert.deepEqual(readProbe({ exitCode: 3, stdout: "/usr/bin/python3\n", stderr: "" }), { kind: "missing-package", executable: "/usr/bin/python3" });
  assert.deepEqual(readProbe({ spawnError: "ENOENT", exitCode: null, stdout: "", stderr: "" }), { kind: "not-found" });
  const broken = readProbe({ exitCode: 1, stdout: "", stderr: "Traceback\nSyntaxError: bad\n" });
  assert.equal(broken.kind, "broken");
  assert.match((broken as { detail: string }).detail, /SyntaxError: bad/);
});

test("the message names what was tried and gives both fixes, with the interpreter that lacks ksearch", () => {
  const msg = noInterpreterMessage([
    { candidate: { command: "/venv/bin/python", source: "python-extension" }, result: { kind: "not-found" } },
    { candidate: { command: "python3", source: "default" }, result: { kind: "missing-package", executable: "/usr/bin/python3" } },
  ]);
  assert.match(msg, /\/venv\/bin\/python \(the Python extension's active interpreter\): no such program/);
  assert.match(msg, /`\/usr\/bin\/python3 -m pip install ksearch`/);
  assert.match(msg, /ksearch\.interpreter/);
  assert.match(msg, /python3 \(from the PATH\): ksearch is not installed in \/usr\/bin\/python3/);
  assert.equal(
    describeAttempt({ command: "/v/python", source: "setting" }, { kind: "missing-package", executable: "/v/python" }),
    "/v/python (from the ksearch.interpreter setting): ksearch is not installed there",
  );
  assert.equal(
    describeAttempt({ command: "/x/python", source: "setting" }, { kind: "broken", detail: "exit code 2" }),
    "/x/python (from the ksearch.interpreter setting): did not run (exit code 2)",
  );
});
