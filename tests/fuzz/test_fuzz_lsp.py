"""Fuzzing the language server's handlers with malformed params: wrong types, missing fields, unknown URIs,
out-of-range positions and ranges, junk command arguments, and random JSON values. Every request must be
answered (a result or a JSON-RPC error) within a time bound, and the server must stay alive and keep
serving a well-formed request afterwards. Runs the real `ksearch-lsp` over stdio (pytest-lsp)."""
from __future__ import annotations

import asyncio
import random
import shutil
import uuid
from concurrent.futures import Future
from pathlib import Path

import pytest
from lsprotocol import types

from tests.e2e.conftest import EXAMPLES, start_editor, stop_editor

ANSWER_S = 15.0


def _random_json(rng: random.Random, depth: int = 0):
    """A random JSON value (what a broken or hostile client might send anywhere)."""
    kinds = ["null", "bool", "int", "float", "str", "list", "dict"] if depth < 3 else ["null", "int", "str"]
    k = rng.choice(kinds)
    if k == "null":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "int":
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30, rng.randint(-1000, 1000)])
    if k == "float":
        return rng.choice([0.5, -1e308, 1e308, 3.14])
    if k == "str":
        return rng.choice(["", "file:///nope.cu", "\0", "x" * 5000, "ksearch.port", "../../etc/passwd",
                           "file:///%00", "untitled:Untitled-1", "☃" * 10])
    if k == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["textDocument", "position", "range", "uri", "line", "character", "command",
                        "arguments", "context", "runId", "candidateId", "x"]): _random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def _cases(uri: str) -> tuple[list, list]:
    """(method, params) pairs. `wrong`: well-typed but wrong (unknown URIs, positions far outside the file,
    inverted ranges, junk command arguments): the handlers must answer them. `malformed`: params that do
    not even fit the method's types (null, lists, missing fields, strings for numbers)."""
    doc = {"uri": uri}
    unknown = {"uri": "file:///definitely/not/here.cu"}
    pos, far = {"line": 3, "character": 2}, {"line": 10**6, "character": 10**6}
    rng_ok = {"start": {"line": 0, "character": 0}, "end": {"line": 5, "character": 0}}
    rng_far = {"start": {"line": 2**31 - 1, "character": 0}, "end": {"line": 0, "character": 0}}
    ctx = {"diagnostics": []}
    wrong: list[tuple[str, object]] = []
    malformed: list[tuple[str, object]] = []
    for method, good in [
        ("textDocument/hover", {"textDocument": doc, "position": pos}),
        ("textDocument/codeLens", {"textDocument": doc}),
        ("textDocument/codeAction", {"textDocument": doc, "range": rng_ok, "context": ctx}),
        ("textDocument/inlayHint", {"textDocument": doc, "range": rng_ok}),
    ]:
        wrong += [(method, {**good, "textDocument": unknown}),
                  (method, {**good, "textDocument": {"uri": "untitled:Untitled-1"}}),
                  (method, {**good, "textDocument": {"uri": "file:///etc/passwd"}})]
        malformed += [(method, None), (method, {}), (method, []), (method, "hover me"),
                      (method, {**good, "textDocument": {}})]
        if "position" in good:
            wrong += [(method, {**good, "position": far})]
            malformed += [(method, {**good, "position": {"line": "x", "character": None}})]
        if "range" in good:
            wrong += [(method, {**good, "range": rng_far})]
            malformed += [(method, {**good, "range": {"start": pos}})]
        if "context" in good:
            malformed += [(method, {**good, "context": {"diagnostics": "none"}})]
    for cmd in ["ksearch.port", "ksearch.optimize", "ksearch.createTask", "ksearch.accept", "ksearch.reject",
                "ksearch.next", "ksearch.cancel", "ksearch.noSuchCommand"]:
        for args in [[], [None], [42, {}], ["file:///nope.cu", "missing_kernel"], [uri, 7],
                     ["run-that-does-not-exist", "cand-x"], [uri, "no_such_kernel", "extra", "args"],
                     ["x" * 10000], [[[[[]]]]]]:
            wrong.append(("workspace/executeCommand", {"command": cmd, "arguments": args}))
    malformed += [("workspace/executeCommand", {"arguments": []}), ("workspace/executeCommand", {"command": 5}),
                  ("workspace/executeCommand", {"command": "ksearch.port", "arguments": "not-a-list"})]
    wrong += [("ksearch/candidate", {"runId": None}), ("ksearch/candidate", {}), ("ksearch/candidate", [1, 2]),
              ("ksearch/candidate", {"runId": "nope", "candidateId": "nope"})]
    return wrong, malformed


def _send_raw(protocol, message: dict) -> None:
    """Write one JSON-RPC message as is: the client's typed API would refuse (or fix) malformed params."""
    protocol._send_data(message)


async def _ask(client, method: str, params, timeout: float = ANSWER_S) -> str:
    """Send one raw request; 'result' or 'error' (a JSON-RPC error reply), never a hang."""
    protocol = client.protocol
    msg_id = str(uuid.uuid4())
    fut: Future = Future()
    protocol._request_futures[msg_id] = fut
    _send_raw(protocol, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    try:
        await asyncio.wait_for(asyncio.wrap_future(fut), timeout)
        return "result"
    except asyncio.TimeoutError:
        protocol._request_futures.pop(msg_id, None)
        raise AssertionError(f"no answer within {timeout}s to {method} {str(params)[:200]}") from None
    except Exception:  # noqa: BLE001 - the JSON-RPC error reply, raised by the client
        return "error"


async def _still_serving(editor, uri: str) -> None:
    lenses = await asyncio.wait_for(editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))), ANSWER_S)
    assert lenses, "after malformed requests the server no longer offers its code lenses"


async def _ask_all(client, cases, timeout: float) -> list[str]:
    """Send all requests at once; each gets 'result', 'error' or 'none' (no answer within `timeout`)."""
    async def one(method, params):
        try:
            return await _ask(client, method, params, timeout)
        except AssertionError:
            return "none"
    return await asyncio.gather(*(one(m, p) for m, p in cases))


@pytest.fixture
async def editor(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(EXAMPLES / "softmax" / "softmax.cu", root / "softmax.cu")
    ed = await start_editor(root, "vscode")
    ed.uri = ed.open(root / "softmax.cu")
    await _still_serving(ed, ed.uri)
    yield ed
    await stop_editor(ed)


@pytest.mark.timeout(180)
async def test_wrong_but_well_typed_requests_are_answered_and_the_server_stays_up(editor):
    uri = editor.uri
    wrong, malformed = _cases(uri)
    outcomes = await _ask_all(editor.client, wrong, ANSWER_S)
    unanswered = [c for c, o in zip(wrong, outcomes) if o == "none"]
    assert not unanswered, f"no answer to {len(unanswered)} requests, e.g. {str(unanswered[0])[:300]}"
    await _still_serving(editor, uri)

    # Random JSON in well-typed slots (executeCommand arguments are any JSON by the protocol).
    rng = random.Random(7)
    cases = [("workspace/executeCommand", {"command": rng.choice(["ksearch.port", "ksearch.accept", "ksearch.next",
                                                                   "ksearch.cancel", "ksearch.createTask"]),
                                           "arguments": [_random_json(rng) for _ in range(rng.randint(0, 3))]})
             for _ in range(60)]
    outcomes = await _ask_all(editor.client, cases, ANSWER_S)
    assert "none" not in outcomes, [c for c, o in zip(cases, outcomes) if o == "none"][:3]

    # Params that do not fit the types, and malformed notifications, must not take the server down.
    await _ask_all(editor.client, malformed, 2.0)
    for params in [None, {}, [], {"textDocument": {"uri": uri}}, {"textDocument": {"uri": 5, "version": "x"}},
                   {"textDocument": {"uri": uri, "version": 99}, "contentChanges": [{"text": 7}]}]:
        for method in ("textDocument/didChange", "textDocument/didOpen", "textDocument/didClose",
                       "workspace/didChangeConfiguration", "workspace/didChangeWatchedFiles"):
            _send_raw(editor.client.protocol, {"jsonrpc": "2.0", "method": method, "params": params})
    await asyncio.sleep(0.5)
    await _still_serving(editor, uri)


@pytest.mark.timeout(120)
async def test_requests_with_params_of_the_wrong_type_get_an_error_reply(editor):
    _, malformed = _cases(editor.uri)
    outcomes = await _ask_all(editor.client, malformed, 5.0)
    unanswered = [c for c, o in zip(malformed, outcomes) if o == "none"]
    assert not unanswered, f"{len(unanswered)} of {len(malformed)} got no reply, e.g. {str(unanswered[0])[:200]}"
    assert outcomes.count("error") >= len(malformed) // 2, outcomes     # mostly InvalidParams, not results
    await _still_serving(editor, editor.uri)
