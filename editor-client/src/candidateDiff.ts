/**
 * Shows a search candidate as a diff against the code it would replace: asks the server for both
 * texts (`ksearch/candidate`), serves them as read-only `ksearch-candidate:` documents, and opens
 * `vscode.diff`.  Also the title-bar Accept / Reject buttons of that diff.
 */
import * as vscode from "vscode";
import {
  CANDIDATE_SCHEME,
  Id,
  Side,
  candidateKey,
  candidateUriParts,
  diffTitle,
  parseCandidateQuery,
} from "./candidateUri";

/** The reply of the server's `ksearch/candidate` request (see docs/CONTRACTS.md). */
export interface CandidateReply {
  uri: string;
  original: string;
  candidate: string;
  language?: string;
  title?: string;
  kernel?: string;
}

/** Something that can send a request to the server (the running language client). */
export interface RequestSender {
  sendRequest<R>(method: string, params: unknown): Promise<R>;
}

function isId(value: unknown): value is Id {
  return typeof value === "string" || typeof value === "number";
}

function readReply(reply: unknown): CandidateReply {
  const r = (typeof reply === "object" && reply !== null ? reply : {}) as Record<string, unknown>;
  if (typeof r.uri !== "string" || typeof r.candidate !== "string") {
    throw new Error("the server's ksearch/candidate reply has no uri or candidate text");
  }
  return {
    uri: r.uri,
    original: typeof r.original === "string" ? r.original : "",
    candidate: r.candidate,
    language: typeof r.language === "string" ? r.language : undefined,
    title: typeof r.title === "string" ? r.title : undefined,
    kernel: typeof r.kernel === "string" ? r.kernel : undefined,
  };
}

/** Reads `[runId, candidateId]` from command arguments or a `{runId, candidateId}` notification. */
export function readCandidateArgs(args: unknown[]): { runId: Id; candidateId: Id } | undefined {
  if (args.length >= 2 && isId(args[0]) && isId(args[1])) {
    return { runId: args[0], candidateId: args[1] };
  }
  const first = args[0];
  if (typeof first === "object" && first !== null) {
    const o = first as Record<string, unknown>;
    if (isId(o.runId) && isId(o.candidateId)) {
      return { runId: o.runId, candidateId: o.candidateId };
    }
  }
  return undefined;
}

export class CandidateDocuments implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly texts = new Map<string, CandidateReply>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  provideTextDocumentContent(uri: vscode.Uri): string {
    const ref = parseCandidateQuery(uri.query);
    const entry = ref && this.texts.get(candidateKey(ref.runId, ref.candidateId));
    if (!ref || !entry) {
      return "ksearch: this candidate is no longer loaded; open it again from its code lens.\n";
    }
    return ref.side === "original" ? entry.original : entry.candidate;
  }

  private uriFor(runId: Id, candidateId: Id, side: Side, target: string): vscode.Uri {
    return vscode.Uri.from(candidateUriParts(runId, candidateId, side, target));
  }

  /** Fetches the candidate from the server and opens the diff editor on it. */
  async show(server: RequestSender, runId: Id, candidateId: Id): Promise<void> {
    const reply = readReply(await server.sendRequest<unknown>("ksearch/candidate", { runId, candidateId }));
    this.texts.set(candidateKey(runId, candidateId), reply);
    const left = this.uriFor(runId, candidateId, "original", reply.uri);
    const right = this.uriFor(runId, candidateId, "candidate", reply.uri);
    // Documents already open from an earlier show of this candidate must re-read their text.
    this.changed.fire(left);
    this.changed.fire(right);
    if (reply.language) {
      for (const uri of [left, right]) {
        try {
          await vscode.languages.setTextDocumentLanguage(await vscode.workspace.openTextDocument(uri), reply.language);
        } catch {
          // An unknown language id only loses highlighting; the diff still opens.
        }
      }
    }
    // One tab per target module (so per kernel): an earlier candidate's tab for the same module is closed.
    await closeCandidateTabs(reply.uri, right.toString());
    if (reply.original === "") {
      // A new module: nothing to compare with, so the candidate alone as a plain preview (full width).
      const document = await vscode.workspace.openTextDocument(right);
      await vscode.window.showTextDocument(document, { preview: true });
      return;
    }
    await vscode.commands.executeCommand("vscode.diff", left, right, diffTitle(reply.title, reply.uri, candidateId), {
      preview: false,
    });
  }

  dispose(): void {
    this.changed.dispose();
    this.texts.clear();
  }
}

/** The module a candidate tab shows (the target's base name is the URI path's last part) and its kernel run. */
function candidateTabTarget(uri: vscode.Uri): string | undefined {
  if (uri.scheme !== CANDIDATE_SCHEME) {
    return undefined;
  }
  return uri.path.split("/").pop();
}

/** Closes the tabs of other candidates for the same target module. */
async function closeCandidateTabs(targetUri: string, keep: string): Promise<void> {
  const name = targetUri.split("/").pop();
  const stale: vscode.Tab[] = [];
  for (const group of vscode.window.tabGroups.all) {
    for (const tab of group.tabs) {
      const input = tab.input;
      const uri =
        input instanceof vscode.TabInputTextDiff ? input.modified : input instanceof vscode.TabInputText ? input.uri : undefined;
      if (uri && candidateTabTarget(uri) === name && uri.toString() !== keep) {
        stale.push(tab);
      }
    }
  }
  if (stale.length > 0) {
    await vscode.window.tabGroups.close(stale, true);
  }
}

/** The candidate shown in the active editor, when it is one side of a candidate diff. */
export function activeCandidate(): { runId: Id; candidateId: Id } | undefined {
  const uri = vscode.window.activeTextEditor?.document.uri;
  if (!uri || uri.scheme !== CANDIDATE_SCHEME) {
    return undefined;
  }
  const ref = parseCandidateQuery(uri.query);
  return ref && { runId: ref.runId, candidateId: ref.candidateId };
}
