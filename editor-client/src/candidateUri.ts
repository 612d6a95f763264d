/**
 * Names of the virtual documents that show a candidate next to the code it would replace.
 * Pure: returns the parts that `vscode.Uri.from` takes, so `node --test` covers it.
 *
 * The path ends with the target file's own name, so the diff editor picks the right language;
 * the query carries the run and candidate ids as JSON, so their types (number or string) come back
 * unchanged when a title-bar button passes them to `ksearch.accept`.
 */

export const CANDIDATE_SCHEME = "ksearch-candidate";

export type Side = "original" | "candidate";

export type Id = string | number;

export interface UriParts {
  scheme: string;
  path: string;
  query: string;
}

export interface CandidateRef {
  runId: Id;
  candidateId: Id;
  side: Side;
}

/** Last path segment of a URI or path, decoded (`file:///a/b%20c.py` → `b c.py`). */
export function baseName(uriOrPath: string): string {
  const withoutQuery = uriOrPath.split(/[?#]/)[0];
  const segments = withoutQuery.split("/").filter((s) => s !== "");
  const last = segments.length > 0 ? segments[segments.length - 1] : "untitled";
  try {
    return decodeURIComponent(last);
  } catch {
    return last;
  }
}

function pathSafe(id: Id): string {
  return String(id).replace(/[^A-Za-z0-9._-]/g, "_");
}

/** Parts of the URI of one side of a candidate diff for the document at `targetUri`. */
export function candidateUriParts(runId: Id, candidateId: Id, side: Side, targetUri: string): UriParts {
  const params = new URLSearchParams({
    run: JSON.stringify(runId),
    candidate: JSON.stringify(candidateId),
    side,
  });
  return {
    scheme: CANDIDATE_SCHEME,
    path: `/${pathSafe(runId)}/${pathSafe(candidateId)}/${side}/${baseName(targetUri)}`,
    query: params.toString(),
  };
}

function readId(raw: string | null): Id | undefined {
  if (raw === null) {
    return undefined;
  }
  try {
    const value: unknown = JSON.parse(raw);
    return typeof value === "string" || typeof value === "number" ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The run, candidate and side named by a candidate URI's query, or undefined if it names none. */
export function parseCandidateQuery(query: string): CandidateRef | undefined {
  const params = new URLSearchParams(query);
  const runId = readId(params.get("run"));
  const candidateId = readId(params.get("candidate"));
  const side = params.get("side");
  if (runId === undefined || candidateId === undefined || (side !== "original" && side !== "candidate")) {
    return undefined;
  }
  return { runId, candidateId, side };
}

/** Key under which both sides of one candidate are cached. */
export function candidateKey(runId: Id, candidateId: Id): string {
  return JSON.stringify([runId, candidateId]);
}

/** Title of the diff editor tab. */
export function diffTitle(serverTitle: string | undefined, targetUri: string, candidateId: Id): string {
  const title = (serverTitle ?? "").trim();
  if (title !== "") {
    return title;
  }
  return `${baseName(targetUri)} ↔ ksearch candidate ${candidateId}`;
}
