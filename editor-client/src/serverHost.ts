/**
 * Starts, stops and restarts the ksearch language server: finds a Python with ksearch installed,
 * runs `<python> -m ksearch_server` over stdio, and reports a missing install with the fix.
 */
import { execFile } from "node:child_process";
import * as os from "node:os";
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, RevealOutputChannelOn, ServerOptions } from "vscode-languageclient/node";
import { DOCUMENT_SELECTOR } from "./documents";
import {
  InterpreterCandidate,
  PROBE_ARGS,
  ProbeResult,
  SERVER_ARGS,
  interpreterCandidates,
  serverLaunch,
  noInterpreterMessage,
  readProbe,
} from "./interpreter";
import { RedactingChannel } from "./redactingChannel";
import { SECTION, describeOptions, initializationOptions, readSettings } from "./settings";
import { saveAccepted } from "./saveAccepted";

const PROBE_TIMEOUT_MS = 20_000;

/** Callbacks for the server's custom notifications; set before the client starts. */
export interface ServerHandlers {
  onJobs(params: unknown): void;
  onShowDiff(params: unknown): void;
  onStopped(): void;
}

/** Reads the stored Gemini key. */
export type KeyReader = () => Promise<string | undefined>;

function probe(command: string): Promise<ProbeResult> {
  return new Promise((resolve) => {
    execFile(command, PROBE_ARGS, { timeout: PROBE_TIMEOUT_MS, windowsHide: true, cwd: os.homedir() }, (error, stdout, stderr) => {
      const err = error as (NodeJS.ErrnoException & { code?: string | number; killed?: boolean }) | null;
      const spawnError = err?.killed
        ? `no answer within ${PROBE_TIMEOUT_MS / 1000} s`
        : err && typeof err.code === "string"
          ? err.code
          : undefined;
      const exitCode = err ? (typeof err.code === "number" ? err.code : null) : 0;
      resolve(readProbe({ spawnError, exitCode, stdout: String(stdout), stderr: String(stderr) }));
    });
  });
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment?(env: { path: string }): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
}

/** The Python extension's API, when that extension is installed. */
async function pythonExtensionApi(): Promise<PythonExtensionApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (!ext) {
    return undefined;
  }
  try {
    return ext.isActive ? ext.exports : await ext.activate();
  } catch {
    return undefined;
  }
}

async function pythonExtensionInterpreter(): Promise<string | undefined> {
  const api = await pythonExtensionApi();
  const envs = api?.environments;
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  const active = envs?.getActiveEnvironmentPath?.(folder);
  if (!envs || !active) {
    return undefined;
  }
  try {
    const resolved = await envs.resolveEnvironment?.(active);
    return resolved?.executable?.uri?.fsPath ?? active.path;
  } catch {
    return active.path;
  }
}

export class ServerHost implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly channel: RedactingChannel,
    private readonly handlers: ServerHandlers,
    private readonly readKey: KeyReader,
  ) {
    void pythonExtensionApi().then((api) => {
      const event = api?.environments?.onDidChangeActiveEnvironmentPath;
      if (event) {
        this.disposables.push(
          event(() => {
            if (!vscode.workspace.isTrusted) {
              return; // Restricted Mode: the environment's interpreter is not used
            }
            if (readSettings((k) => vscode.workspace.getConfiguration(SECTION).get(k)).interpreter === "") {
              void this.restart("the Python extension's interpreter changed");
            }
          }),
        );
      }
    });
  }

  /** The running client, if the server is up. */
  get running(): LanguageClient | undefined {
    return this.client?.isRunning() ? this.client : undefined;
  }

  /** Starts the server (no-op when it runs).  Starts and stops are serialized. */
  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop());
  }

  restart(reason: string): Promise<void> {
    return this.enqueue(async () => {
      this.channel.info(`Restarting the ksearch server: ${reason}.`);
      await this.doStop();
      await this.doStart();
    });
  }

  private enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.queue.then(step, step);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async findInterpreter(): Promise<string | undefined> {
    const settings = readSettings((k) => vscode.workspace.getConfiguration(SECTION).get(k));
    const candidates: InterpreterCandidate[] = interpreterCandidates({
      setting: settings.interpreter,
      pythonExtension: settings.interpreter === "" && vscode.workspace.isTrusted ? await pythonExtensionInterpreter() : undefined,
      platform: process.platform,
      workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
      home: os.homedir(),
      trusted: vscode.workspace.isTrusted,
    });
    const attempts: { candidate: InterpreterCandidate; result: ProbeResult }[] = [];
    for (const candidate of candidates) {
      const result = await probe(candidate.command);
      attempts.push({ candidate, result });
      if (result.kind === "ok") {
        this.channel.info(`Using ${result.executable} (${candidate.source}).`);
        return result.executable;
      }
    }
    const message = noInterpreterMessage(attempts);
    this.channel.error(message);
    void vscode.window.showErrorMessage(message, "Set ksearch.interpreter", "Show Log").then((choice) => {
      if (choice === "Set ksearch.interpreter") {
        void vscode.commands.executeCommand("workbench.action.openSettings", "ksearch.interpreter");
      } else if (choice === "Show Log") {
        this.channel.show();
      }
    });
    return undefined;
  }

  private async doStart(): Promise<void> {
    if (this.client) {
      return;
    }
    const python = await this.findInterpreter();
    if (python === undefined) {
      return;
    }
    const key = await this.readKey();
    this.channel.addSecret(key);
    const settings = readSettings((k) => vscode.workspace.getConfiguration(SECTION).get(k));
    const options = initializationOptions(settings, key);
    this.channel.info(`Starting ${python} ${SERVER_ARGS.join(" ")} (${describeOptions(options)}).`);

    // Never from the workspace: with -P and this cwd, nothing in a cloned repository can stand in for ksearch.
    const serverOptions: ServerOptions = serverLaunch(python, os.homedir(), process.env,
      vscode.workspace.workspaceFolders?.[0]?.uri.fsPath);
    const clientOptions: LanguageClientOptions = {
      documentSelector: DOCUMENT_SELECTOR,
      outputChannel: this.channel,
      traceOutputChannel: this.channel,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: options,
      // Do not retry a failed initialize: the error shown by the catch below says what to do.
      initializationFailedHandler: () => false,
      middleware: {
        // Accept from a lens: when the server applied the change to an open document, save it.
        executeCommand: async (command, args, next) => {
          const result = await next(command, args);
          if (command === "ksearch.accept") {
            await saveAccepted(result as { applied?: boolean; saved?: boolean; uri?: string } | undefined);
          }
          return result;
        },
      },
    };
    const client = new LanguageClient("ksearch", "ksearch", serverOptions, clientOptions);
    client.onNotification("ksearch/jobs", (params: unknown) => this.handlers.onJobs(params));
    client.onNotification("ksearch/showDiff", (params: unknown) => this.handlers.onShowDiff(params));
    this.client = client;
    try {
      await client.start();
      this.handlers.onJobs({}); // the status bar shows "ksearch" (idle) until the server reports jobs
    } catch (error) {
      this.client = undefined;
      const text = error instanceof Error ? error.message : String(error);
      this.channel.error(`The server did not start: ${text}`);
      void vscode.window.showErrorMessage(
        `ksearch: ${python} -m ksearch_server did not start (${text}). ` +
          `Check that \`${python} -m pip install ksearch\` succeeded; the server log has details.`,
        "Show Log",
      ).then((choice) => choice && this.channel.show());
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(5000);
      } catch (error) {
        this.channel.warn(`Stopping the server: ${error instanceof Error ? error.message : String(error)}`);
      }
      this.handlers.onStopped();
    }
  }

  /** Sends the Gemini key (or null to forget it) to the running server, outside any settings. */
  async sendSecret(key: string | undefined): Promise<void> {
    this.channel.addSecret(key);
    const client = this.running;
    if (client) {
      await client.sendNotification("ksearch/secret", { geminiApiKey: key ?? null });
    }
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
    void this.stop();
  }
}
