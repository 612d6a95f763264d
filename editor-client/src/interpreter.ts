/**
 * Which Python interpreter runs the ksearch language server, and how to read the probe that checks
 * it has ksearch installed.  Pure: imports neither `vscode` nor the language client, so `node --test`
 * covers it.
 *
 * Order: the `ksearch.interpreter` setting (an explicit choice: used alone, never silently replaced),
 * else the Python extension's active interpreter, else `python3` (`python` on Windows) from the PATH.
 *
 * In an untrusted workspace (Restricted Mode) nothing the workspace chose is run, as ruff-vscode does:
 * the environment's interpreter (often the workspace's own `.venv`) is ignored, and so is a setting that
 * points into the workspace; VS Code already hides the workspace's value of `ksearch.interpreter`
 * (a restricted setting), so only the user's own choice or the PATH's Python remain.
 */

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface InterpreterCandidate {
  command: string;
  source: InterpreterSource;
}

export interface CandidateInputs {
  /** Value of `ksearch.interpreter` (empty or undefined: not set). */
  setting?: string;
  /** Executable path of the Python extension's active environment, when that extension is present. */
  pythonExtension?: string;
  /** `process.platform`. */
  platform: string;
  /** First workspace folder's file-system path, for `${workspaceFolder}` in the setting. */
  workspaceFolder?: string;
  /** The user's home directory, for `~` in the setting. */
  home?: string;
  /** `vscode.workspace.isTrusted`; undefined counts as trusted (VS Code without workspace trust). */
  trusted?: boolean;
}

/** Whether `path` lies in `folder` (both file-system paths; `/` and `\` separators). */
export function isInside(path: string, folder: string | undefined): boolean {
  if (!folder) {
    return false;
  }
  const norm = (p: string) => p.replace(/\\/g, "/").replace(/\/+$/, "");
  const p = norm(path);
  const f = norm(folder);
  return f !== "" && (p === f || p.startsWith(f + "/"));
}

/** Expands `${workspaceFolder}`, `${userHome}` and a leading `~` the way VS Code users expect. */
export function expandSetting(value: string, workspaceFolder?: string, home?: string): string {
  let out = value.trim();
  if (workspaceFolder !== undefined) {
    out = out.split("${workspaceFolder}").join(workspaceFolder);
  }
  if (home !== undefined) {
    out = out.split("${userHome}").join(home);
    if (out === "~" || out.startsWith("~/")) {
      out = home + out.slice(1);
    }
  }
  return out;
}

/** The interpreters to try, in order, without duplicates. */
export function interpreterCandidates(inputs: CandidateInputs): InterpreterCandidate[] {
  const trusted = inputs.trusted !== false;
  const setting = (inputs.setting ?? "").trim();
  if (setting !== "") {
    const command = expandSetting(setting, inputs.workspaceFolder, inputs.home);
    const relative = /[\\/]/.test(command) && !command.startsWith("/") && !/^[A-Za-z]:/.test(command);
    const fromWorkspace = setting.includes("${workspaceFolder}") || isInside(command, inputs.workspaceFolder) || relative;
    if (trusted || !fromWorkspace) {
      return [{ command, source: "setting" }];
    }
  }
  const out: InterpreterCandidate[] = [];
  const fromExtension = trusted ? (inputs.pythonExtension ?? "").trim() : "";
  if (fromExtension !== "") {
    out.push({ command: fromExtension, source: "python-extension" });
  }
  const fallback = inputs.platform === "win32" ? "python" : "python3";
  if (!out.some((c) => c.command === fallback)) {
    out.push({ command: fallback, source: "default" });
  }
  return out;
}

/**
 * Arguments for the probe: prints the interpreter's real path and exits 3 when the server module
 * cannot be found.  `find_spec` locates `ksearch_server.__main__` without running it (the server
 * pulls in MLX); a missing package or a package without its entry module both count as "not installed".
 */
export const PROBE_ARGS = [
  "-P",
  "-c",
  "import importlib.util, sys; print(sys.executable)\n" +
    "try:\n    found = importlib.util.find_spec('ksearch_server.__main__') is not None\n" +
    "except ImportError:\n    found = False\n" +
    "sys.exit(0 if found else 3)",
];

/**
 * The module the server runs as: `<python> -P -m ksearch_server`.  `-P` keeps the working directory off
 * `sys.path`, so a `ksearch_server/` or `ksearch_engine/` folder in a cloned repository is never imported.
 */
export const SERVER_ARGS = ["-P", "-m", "ksearch_server"];

export interface ServerLaunch {
  command: string;
  args: string[];
  options: { cwd: string; env: Record<string, string | undefined> };
}

/**
 * How the server (and the probe) are started: with `-P`, `PYTHONSAFEPATH=1` for every Python it starts,
 * and a working directory that is never the workspace (`safeDir`: the extension's storage or the home).
 */
export function serverLaunch(
  python: string,
  safeDir: string,
  env: Record<string, string | undefined>,
  workspaceFolder?: string,
): ServerLaunch {
  if (isInside(safeDir, workspaceFolder)) {
    throw new Error(`ksearch: refusing to start the server inside the workspace (${safeDir})`);
  }
  return { command: python, args: SERVER_ARGS, options: { cwd: safeDir, env: { ...env, PYTHONUNBUFFERED: "1", PYTHONSAFEPATH: "1" } } };
}

export type ProbeResult =
  | { kind: "ok"; executable: string }
  | { kind: "missing-package"; executable: string }
  | { kind: "not-found" }
  | { kind: "broken"; detail: string };

export interface ProbeOutcome {
  /** Error code from spawning (`ENOENT`, `EACCES`...), when the process did not start. */
  spawnError?: string;
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/** Reads what the probe process did. */
export function readProbe(outcome: ProbeOutcome): ProbeResult {
  if (outcome.spawnError === "ENOENT" || outcome.spawnError === "EACCES") {
    return { kind: "not-found" };
  }
  if (outcome.spawnError !== undefined) {
    return { kind: "broken", detail: outcome.spawnError };
  }
  const executable = outcome.stdout.trim().split(/\r?\n/)[0] ?? "";
  if (outcome.exitCode === 0 && executable !== "") {
    return { kind: "ok", executable };
  }
  if (outcome.exitCode === 3 && executable !== "") {
    return { kind: "missing-package", executable };
  }
  const detail = (outcome.stderr.trim() || outcome.stdout.trim() || `exit code ${outcome.exitCode}`)
    .split(/\r?\n/)
    .slice(-3)
    .join(" ");
  return { kind: "broken", detail };
}

const SOURCE_WORDS: Record<InterpreterSource, string> = {
  setting: "from the ksearch.interpreter setting",
  "python-extension": "the Python extension's active interpreter",
  default: "from the PATH",
};

/** One line per interpreter tried, saying what was wrong with it. */
export function describeAttempt(candidate: InterpreterCandidate, result: ProbeResult): string {
  const where = `${candidate.command} (${SOURCE_WORDS[candidate.source]})`;
  switch (result.kind) {
    case "ok":
      return `${where}: has ksearch`;
    case "missing-package":
      return result.executable === candidate.command
        ? `${where}: ksearch is not installed there`
        : `${where}: ksearch is not installed in ${result.executable}`;
    case "not-found":
      return `${where}: no such program`;
    case "broken":
      return `${where}: did not run (${result.detail})`;
  }
}

/** The message shown when no interpreter has ksearch: what was tried and the two ways to fix it. */
export function noInterpreterMessage(
  attempts: { candidate: InterpreterCandidate; result: ProbeResult }[],
): string {
  const missingIn = attempts.find((a) => a.result.kind === "missing-package");
  const python =
    missingIn && missingIn.result.kind === "missing-package" ? missingIn.result.executable : "python3";
  const tried = attempts.map((a) => describeAttempt(a.candidate, a.result)).join("; ");
  return (
    `ksearch could not start its language server. Tried ${tried}. ` +
    `Fix: run \`${python} -m pip install ksearch\`, or set the setting ksearch.interpreter ` +
    `to a Python that has ksearch installed.`
  );
}
