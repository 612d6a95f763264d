/**
 * The `ksearch.*` settings the server reads, turned into the server's `initializationOptions`, and
 * which setting changes need a server restart.  Pure: `node --test` covers it.
 *
 * The Gemini key travels only in `initializationOptions.geminiApiKey` and the `ksearch/secret`
 * notification; `describeOptions` is what may be logged, and it never contains the key.
 */

export const SECTION = "ksearch";

export type Proposer = "offline" | "gemini" | "openai";

export interface KsearchSettings {
  interpreter: string;
  proposer: Proposer;
  model: string;
  budget: { evaluations: number };
  backend: string;
  storePath: string;
  concurrency: number;
  openaiBaseUrl: string;
  /** A Ray cluster that evaluates candidates (ray://HOST:PORT, HOST:PORT, local, auto); empty: this machine. */
  cluster: string;
}

export const DEFAULTS: KsearchSettings = {
  interpreter: "",
  proposer: "offline",
  model: "",
  budget: { evaluations: 24 },
  backend: "auto",
  storePath: "",
  concurrency: 1,
  openaiBaseUrl: "http://127.0.0.1:8080/v1",
  cluster: "",
};

/** Reads settings through `get(key)` (for example `workspace.getConfiguration('ksearch').get`). */
export function readSettings(get: (key: string) => unknown): KsearchSettings {
  const str = (key: string, fallback: string): string => {
    const v = get(key);
    return typeof v === "string" ? v.trim() : fallback;
  };
  const int = (key: string, fallback: number, min: number): number => {
    const v = get(key);
    return typeof v === "number" && Number.isFinite(v) && v >= min ? Math.floor(v) : fallback;
  };
  const proposer = str("proposer", DEFAULTS.proposer);
  return {
    interpreter: str("interpreter", DEFAULTS.interpreter),
    proposer: proposer === "gemini" || proposer === "openai" ? proposer : "offline",
    model: str("model", DEFAULTS.model),
    budget: { evaluations: int("budget.evaluations", DEFAULTS.budget.evaluations, 1) },
    backend: str("backend", DEFAULTS.backend) || DEFAULTS.backend,
    storePath: str("storePath", DEFAULTS.storePath),
    concurrency: int("concurrency", DEFAULTS.concurrency, 1),
    openaiBaseUrl: str("openaiBaseUrl", DEFAULTS.openaiBaseUrl),
    cluster: str("cluster", DEFAULTS.cluster),
  };
}

export interface InitializationOptions {
  /** The `ksearch` settings section, as `workspace/configuration` would return it. */
  ksearch: Omit<KsearchSettings, "interpreter">;
  geminiApiKey?: string;
  /** Commands this extension implements itself: the server's lenses name them instead of its own fallbacks. */
  clientCommands: string[];
}

/** The diff view of this extension (other clients get the server's `ksearch.diff`). */
export const CLIENT_COMMANDS = ["ksearch.showDiff"];

/** What the server gets in `initialize`: the settings, and the key when the user stored one. */
export function initializationOptions(settings: KsearchSettings, geminiApiKey?: string): InitializationOptions {
  const { interpreter: _interpreter, ...forServer } = settings;
  const out: InitializationOptions = { ksearch: forServer, clientCommands: CLIENT_COMMANDS };
  if (geminiApiKey !== undefined && geminiApiKey !== "") {
    out.geminiApiKey = geminiApiKey;
  }
  return out;
}

/** A log line describing the options without the key. */
export function describeOptions(options: InitializationOptions): string {
  const s = options.ksearch;
  return (
    `proposer=${s.proposer}${s.model ? ` model=${s.model}` : ""} backend=${s.backend} ` +
    `budget.evaluations=${s.budget.evaluations} concurrency=${s.concurrency}` +
    `${s.storePath ? ` storePath=${s.storePath}` : ""}` +
    `${s.cluster ? ` cluster=${s.cluster}` : ""}` +
    ` geminiApiKey=${options.geminiApiKey ? "set" : "not set"}`
  );
}

/** Removes every occurrence of the secrets from a text before it is shown or logged. */
export function redact(text: string, secrets: (string | undefined)[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret !== undefined && secret.length >= 4) {
      out = out.split(secret).join("***");
    }
  }
  return out;
}

/** The settings a change to which restarts the server (all of them: the server reads them at start). */
export const RESTART_KEYS = [
  "interpreter",
  "proposer",
  "model",
  "budget.evaluations",
  "backend",
  "storePath",
  "concurrency",
  "openaiBaseUrl",
  "cluster",
].map((k) => `${SECTION}.${k}`);
