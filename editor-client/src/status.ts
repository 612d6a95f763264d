/**
 * Text of the status-bar item, from the server's `ksearch/jobs` notification
 * `{running, queued, best}`.  Pure: `node --test` covers it.
 */

export interface JobsStatus {
  running: number;
  queued: number;
  best: string | null;
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/** Reads a `ksearch/jobs` payload, tolerating missing or malformed fields (they count as none). */
export function readJobsStatus(params: unknown): JobsStatus {
  const p = (typeof params === "object" && params !== null ? params : {}) as Record<string, unknown>;
  const best = typeof p.best === "string" && p.best.trim() !== "" ? p.best.trim() : null;
  return { running: count(p.running), queued: count(p.queued), best };
}

export interface StatusView {
  text: string;
  tooltip: string;
  busy: boolean;
}

/** What the status bar shows: a spinning icon while jobs run, the best result once there is one. */
export function formatJobsStatus(status: JobsStatus): StatusView {
  const busy = status.running > 0 || status.queued > 0;
  const parts: string[] = [];
  if (status.running > 0) {
    parts.push(`${status.running} running`);
  }
  if (status.queued > 0) {
    parts.push(`${status.queued} queued`);
  }
  if (status.best !== null) {
    parts.push(`best ${status.best}`);
  }
  const icon = busy ? "$(sync~spin)" : status.best !== null ? "$(rocket)" : "$(circuit-board)";
  const text = parts.length > 0 ? `${icon} ksearch: ${parts.join(" · ")}` : `${icon} ksearch`;
  const tooltipLines = [
    busy
      ? `ksearch: ${status.running} search(es) running, ${status.queued} waiting.`
      : "ksearch: no search running.",
  ];
  if (status.best !== null) {
    tooltipLines.push(`Best result so far: ${status.best}.`);
  }
  tooltipLines.push("Click to show the server log.");
  return { text, tooltip: tooltipLines.join("\n"), busy };
}
