/** Candidate diff URIs: the right file name for highlighting, ids that come back with their types. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { CANDIDATE_SCHEME, baseName, candidateKey, candidateUriParts, diffTitle, parseCandidateQuery } from "../src/candidateUri";

test("the path ends with the target's decoded file name and names run, candidate and side", () => {
  const parts = candidateUriParts(7, "c-3", "candidate", "file:///home/u/My%20Proj/softmax_mlx.py");
  assert.equal(parts.scheme, CANDIDATE_SCHEME);
  assert.equal(parts.path, "/7/c-3/candidate/softmax_mlx.py");
  assert.deepEqual(parseCandidateQuery(parts.query), { runId: 7, candidateId: "c-3", side: "candidate" });
});

test("ids keep their JSON types and odd characters survive the query", () => {
  const parts = candidateUriParts("run/1 & 2?", 42, "original", "/abs/path/k.cu");
  assert.equal(parts.path, "/run_1___2_/42/original/k.cu");
  assert.deepEqual(parseCandidateQuery(parts.query), { runId: "run/1 & 2?", candidateId: 42, side: "original" });
});

test("a query that names no candidate is rejected", () => {
  assert.equal(parseCandidateQuery(""), undefined);
  assert.equal(parseCandidateQuery("run=1&candidate=2&side=left"), undefined);
  assert.equal(parseCandidateQuery("run=%7B%7D&candidate=2&side=original"), undefined);
});

test("base names, cache keys and titles", () => {
  assert.equal(baseName("file:///a/b/c.metal?x=1"), "c.metal");
  assert.equal(baseName(""), "untitled");
  assert.notEqual(candidateKey(1, 2), candidateKey("1", 2));
  assert.equal(diffTitle(undefined, "file:///w/softmax.cu", 3), "softmax.cu ↔ ksearch candidate 3");
  assert.equal(diffTitle("  Port softmax to MLX  ", "file:///w/softmax.cu", 3), "Port softmax to MLX");
});
