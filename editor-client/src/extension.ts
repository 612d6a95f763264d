/**
 * Entry point of the ksearch extension: wires the server host, the candidate diff, the status bar,
 * the API-key commands, and restarts the server when a ksearch setting or the workspace trust changes.
 */
import * as vscode from "vscode";
import { CandidateDocuments, activeCandidate, readCandidateArgs } from "./candidateDiff";
import { CANDIDATE_SCHEME, Id, parseCandidateQuery } from "./candidateUri";
import { RedactingChannel } from "./redactingChannel";
import { saveAccepted } from "./saveAccepted";
import { ServerHost } from "./serverHost";
import { RESTART_KEYS, SECTION } from "./settings";
import { formatJobsStatus, readJobsStatus } from "./status";

const KEY_SECRET = "ksearch.geminiApiKey";
const RESTART_DELAY_MS = 300;

let host: ServerHost | undefined;

function candidateFromCommandArgs(args: unknown[]): { runId: Id; candidateId: Id } | undefined {
  // From the diff's title bar VS Code passes the document's URI; from the palette, nothing.
  const first = args[0];
  if (first instanceof vscode.Uri && first.scheme === CANDIDATE_SCHEME) {
    const ref = parseCandidateQuery(first.query);
    return ref && { runId: ref.runId, candidateId: ref.candidateId };
  }
  return readCandidateArgs(args) ?? activeCandidate();
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const channel = new RedactingChannel(vscode.window.createOutputChannel("ksearch", { log: true }));
  const documents = new CandidateDocuments();
  const status = vscode.window.createStatusBarItem("ksearch.jobs", vscode.StatusBarAlignment.Left, 50);
  status.name = "ksearch jobs";
  status.command = "ksearch.showLog";
  const showStatus = (params: unknown): void => {
    const view = formatJobsStatus(readJobsStatus(params));
    status.text = view.text;
    status.tooltip = view.tooltip;
    status.show();
  };

  const showDiff = async (runId: Id, candidateId: Id): Promise<void> => {
    const client = host?.running;
    if (!client) {
      void vscode.window.showWarningMessage("ksearch: the server is not running, so the candidate cannot be shown.");
      return;
    }
    try {
      await documents.show(client, runId, candidateId);
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      channel.error(`Showing candidate ${candidateId} of run ${runId}: ${text}`);
      void vscode.window.showErrorMessage(`ksearch: could not show candidate ${candidateId} of run ${runId}: ${text}`);
    }
  };

  host = new ServerHost(
    channel,
    {
      onJobs: showStatus,
      onShowDiff: (params) => {
        const ids = readCandidateArgs([params]);
        if (ids) {
          void showDiff(ids.runId, ids.candidateId);
        } else {
          channel.warn(`Ignored a ksearch/showDiff notification without runId and candidateId.`);
        }
      },
      onStopped: () => status.hide(),
    },
    async () => context.secrets.get(KEY_SECRET),
  );

  const decide = (command: "ksearch.accept" | "ksearch.reject") => async (...args: unknown[]) => {
    const ids = candidateFromCommandArgs(args);
    if (!ids) {
      void vscode.window.showWarningMessage("ksearch: open a candidate diff first.");
      return;
    }
    const result = (await vscode.commands.executeCommand(command, ids.runId, ids.candidateId)) as
      | { applied?: boolean; saved?: boolean; uri?: string }
      | undefined;
    await saveAccepted(result);
    if (activeCandidate()) {
      await vscode.commands.executeCommand("workbench.action.closeActiveEditor");
    }
  };

  let restartTimer: NodeJS.Timeout | undefined;
  const restartSoon = (reason: string): void => {
    clearTimeout(restartTimer);
    restartTimer = setTimeout(() => void host?.restart(reason), RESTART_DELAY_MS);
  };

  context.subscriptions.push(
    channel,
    documents,
    status,
    host,
    { dispose: () => clearTimeout(restartTimer) },
    vscode.workspace.registerTextDocumentContentProvider(CANDIDATE_SCHEME, documents),
    vscode.commands.registerCommand("ksearch.showDiff", async (...args: unknown[]) => {
      const ids = readCandidateArgs(args);
      if (!ids) {
        void vscode.window.showWarningMessage("ksearch.showDiff needs a run id and a candidate id.");
        return;
      }
      await showDiff(ids.runId, ids.candidateId);
    }),
    vscode.commands.registerCommand("ksearch.acceptShown", decide("ksearch.accept")),
    vscode.commands.registerCommand("ksearch.rejectShown", decide("ksearch.reject")),
    vscode.commands.registerCommand("ksearch.showLog", () => channel.show()),
    vscode.commands.registerCommand("ksearch.restart", () => host?.restart("asked by the user")),
    vscode.commands.registerCommand("ksearch.setApiKey", async () => {
      const key = await vscode.window.showInputBox({
        title: "ksearch: Gemini API key",
        prompt: "Stored in VS Code's secret storage and sent only to the ksearch server, never to settings or logs.",
        password: true,
        ignoreFocusOut: true,
        validateInput: (v) => (v.trim().length < 8 ? "That is too short to be an API key." : undefined),
      });
      if (key === undefined) {
        return;
      }
      await context.secrets.store(KEY_SECRET, key.trim());
      await host?.sendSecret(key.trim());
      const proposer = vscode.workspace.getConfiguration(SECTION).get<string>("proposer");
      if (proposer !== "gemini") {
        const choice = await vscode.window.showInformationMessage(
          "ksearch: key stored. The proposer is not Gemini yet; set ksearch.proposer to gemini to use it.",
          "Use Gemini",
        );
        if (choice === "Use Gemini") {
          await vscode.workspace
            .getConfiguration(SECTION)
            .update("proposer", "gemini", vscode.ConfigurationTarget.Global);
        }
      } else {
        void vscode.window.showInformationMessage("ksearch: Gemini key stored.");
      }
    }),
    vscode.commands.registerCommand("ksearch.clearApiKey", async () => {
      await context.secrets.delete(KEY_SECRET);
      await host?.sendSecret(undefined);
      void vscode.window.showInformationMessage("ksearch: Gemini key removed.");
    }),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (RESTART_KEYS.some((key) => event.affectsConfiguration(key))) {
        restartSoon("a ksearch setting changed");
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => restartSoon("the workspace is now trusted")),
  );

  // Not awaited: activation returns at once; the server's own start reports its errors.
  void host.start();
}

export async function deactivate(): Promise<void> {
  await host?.stop();
  host = undefined;
}
