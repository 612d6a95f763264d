/** Status bar text from ksearch/jobs. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { formatJobsStatus, readJobsStatus } from "../src/status";

test("running and queued jobs spin and are counted; the best result is shown", () => {
  const view = formatJobsStatus(readJobsStatus({ running: 1, queued: 2, best: "softmax 3.1x" }));
  assert.equal(view.text, "$(sync~spin) ksearch: 1 running · 2 queued · best softmax 3.1x");
  assert.equal(view.busy, true);
  assert.match(view.tooltip, /1 search\(es\) running, 2 waiting/);
});

test("idle with a result shows it without spinning; idle without one says just ksearch", () => {
  assert.equal(formatJobsStatus(readJobsStatus({ running: 0, queued: 0, best: "2.0x" })).text, "$(rocket) ksearch: best 2.0x");
  const idle = formatJobsStatus(readJobsStatus({ running: 0, queued: 0, best: null }));
  assert.equal(idle.text, "$(circuit-board) ksearch");
  assert.equal(idle.busy, false);
  assert.match(idle.tooltip, /no search running/);
});

test("malformed payloads count as no jobs", () => {
  assert.deepEqual(readJobsStatus(null), { running: 0, queued: 0, best: null });
  assert.deepEqual(readJobsStatus({ running: "3", queued: -1, best: "  " }), { running: 0, queued: 0, best: null });
  assert.deepEqual(readJobsStatus({ running: 2.7 }), { running: 2, queued: 0, best: null });
});
