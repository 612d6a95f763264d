/**
 * After Accept: the server writes a module the editor does not hold open itself; a change it applied to an open
 * document is saved here, so Accept always leaves the result on disk (or says it could not).
 */
import * as vscode from "vscode";

/** Accept leaves the module saved: a change the server applied to an open document is saved here (the server
 * confirms each Accept and Reject with a message of its own). */
export async function saveAccepted(result: { applied?: boolean; saved?: boolean; uri?: string } | undefined): Promise<void> {
  if (!result || !result.applied || result.saved !== false || !result.uri) {
    return;
  }
  const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === result.uri);
  if (document && document.isDirty && !(await document.save())) {
    void vscode.window.showWarningMessage(`ksearch: ${document.fileName} was changed but could not be saved.`);
  }
}

