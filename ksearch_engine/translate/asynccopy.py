"""libcu++ asynchronous copies (<cuda/pipeline>, <cuda/barrier>) as plain copies, where that keeps the kernel's
meaning: a copy may complete any time between its issue and the wait that the kernel relies on, so a kernel that
waits for each batch before issuing the next (a single-stage pipeline, a block barrier's arrive_and_wait) computes
the same with the copy done at issue. Both ports then copy element by element and order the copies with the
kernel's own barriers (a `bar.arrive_and_wait()` becomes `__syncthreads()`).

Refused, named with their line: multi-stage pipelines (copies issued for later stages in a loop of their own, which
would refill a buffer still being read), pipelines shared by a block (producer/consumer roles), group copies."""
from __future__ import annotations

import re

from .rewrite import Issue
from .sharedproxy import with_kernel_body

_PIPE_DECL = re.compile(r"cuda::pipeline\s*<[^;<>]*(?:<[^;<>]*>[^;<>]*)*>\s+(\w+)\s*=\s*cuda::make_pipeline\s*\(\s*\)\s*;")
_SHAPE = re.compile(r"(?:const\s+)?auto\s+(\w+)\s*=\s*cuda::aligned_size_t\s*<[^;]*?>\s*\(([^;]*)\)\s*;")
_BAR_DECL = re.compile(r"__shared__\s+cuda::barrier\s*<[^;]*>\s+(\w+)\s*;")
_COPY = re.compile(r"cuda::memcpy_async\s*\(")
_REFUSED = [(re.compile(r"cuda::pipeline_shared_state\b"), "cuda::pipeline_shared_state",
             "a pipeline shared by the block (producer and consumer roles) has no Metal form: its consumers wait "
             "for copies other threads issue; port it with plain copies and threadgroup barriers by hand"),
            (re.compile(r"cuda::make_pipeline\s*\(\s*[^)\s]"), "cuda::make_pipeline(group, ...)",
             "a block-scoped pipeline has no Metal form; port it with plain copies and threadgroup barriers by hand"),
            (re.compile(r"\b__pipeline_memcpy_async\b|\bcooperative_groups::memcpy_async\b|\bcg::memcpy_async\b"),
             "memcpy_async (primitives / cooperative groups)",
             "this asynchronous copy API is not translated; port it as plain copies followed by a barrier")]


def _blank(text: str) -> str:
    """An empty statement in place of `text` (same lines): `if (t == 0) init(&bar, n);` keeps its body."""
    return ";" + re.sub(r"[^\n]", " ", text[1:])


def _args(text: str, open_paren: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose '(' is at `open_paren`, and the offset after its ')'."""
    depth, start, out = 0, open_paren + 1, []
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
                return [a.strip() for a in out], i + 1
        elif c == "," and depth == 1:
            out.append(text[start:i])
            start = i + 1
    return None


def _enclosing_loop(body: str, pos: int) -> str | None:
    """The text of the innermost for/while block around `pos`."""
    depth, i = 0, pos
    while i > 0:
        i -= 1
        if body[i] == "}":
            depth += 1
        elif body[i] == "{":
            if depth == 0:
                head = body[max(0, i - 400):i]
                if re.search(r"\b(?:for|while)\s*\((?:[^(){};]|\([^()]*\)|;)*\)\s*$", head):
                    j, d = i, 0
                    while j < len(body):
                        d += (body[j] == "{") - (body[j] == "}")
                        if d == 0:
                            break
                        j += 1
                    return body[i:j + 1]
            else:
                depth -= 1
    return None


def lower_async_copies(parse_result, kernel_name: str, issues: list[Issue]):
    """parse_result with `kernel_name`'s asynchronous copies made plain (same lines), or the same parse_result
    (with an error in `issues` naming the construct and its line when they cannot be)."""
    k = parse_result.kernel(kernel_name)
    if k is None or "memcpy_async" not in k.body and "cuda::" not in k.body:
        return parse_result
    src = parse_result.source.encode()
    start, end = k.byte_range
    body = src[start:end].decode("utf-8", "replace")
    line0 = k.range.start.line

    def line_of(pos: int) -> int:
        return line0 + body.count("\n", 0, pos)

    for pat, construct, why in _REFUSED:
        m = pat.search(body)
        if m:
            issues.append(Issue(construct=construct, line=line_of(m.start()), severity="error", message=why))
            return parse_result
    pipes = [m.group(1) for m in _PIPE_DECL.finditer(body)]
    bars = [m.group(1) for m in _BAR_DECL.finditer(body)]
    if not pipes and not bars:
        m = _COPY.search(body)
        if m:
            issues.append(Issue(construct="cuda::memcpy_async", line=line_of(m.start()), severity="error",
                                message="an asynchronous copy through a pipeline or barrier this kernel does not "
                                        "declare itself is not translated; port it as a plain copy and a barrier"))
        return parse_result
    for p in pipes:   # a multi-stage pipeline: commits in a loop of their own, ahead of the wait
        for m in re.finditer(r"\b" + re.escape(p) + r"\s*\.\s*producer_commit\s*\(", body):
            loop = _enclosing_loop(body, m.start())
            if loop is not None and not re.search(r"\b" + re.escape(p) + r"\s*\.\s*consumer_wait\b", loop) \
                    and re.search(r"\b" + re.escape(p) + r"\s*\.\s*consumer_wait\b", body):
                issues.append(Issue(construct="cuda::pipeline (multi-stage)", line=line_of(m.start()),
                                    severity="error",
                                    message=f"'{p}' commits copies for later stages in a loop ahead of its "
                                            "consumer_wait: done at issue they would refill a buffer still being "
                                            "read; Metal has no asynchronous copy, so port it single-stage (copy, "
                                            "threadgroup barrier, compute, barrier)"))
                return parse_result
    out = body
    out = _PIPE_DECL.sub(lambda m: _blank(m.group(0)), out)
    out = _BAR_DECL.sub(lambda m: _blank(m.group(0)), out)
    out = _SHAPE.sub(lambda m: f"const unsigned int {m.group(1)} = (unsigned int)({m.group(2)});"
                     + "\n" * m.group(0).count("\n"), out)
    for p in pipes:
        out = re.sub(r"\b" + re.escape(p) + r"\s*\.\s*(?:producer_acquire|producer_commit|consumer_wait|"
                     r"consumer_release)\s*\(\s*\)\s*;", lambda m: _blank(m.group(0)), out)
        out = re.sub(r"cuda::pipeline_consumer_wait_prior\s*<[^;>]*>\s*\(\s*" + re.escape(p) + r"\s*\)\s*;",
                     lambda m: _blank(m.group(0)), out)
    for b in bars:
        out = re.sub(r"\binit\s*\(\s*&\s*" + re.escape(b) + r"\s*,[^;]*\)\s*;", lambda m: _blank(m.group(0)), out)
        out = re.sub(r"\b" + re.escape(b) + r"\s*\.\s*arrive_and_wait\s*\(\s*\)\s*;",
                     lambda m: "__syncthreads();" + " " * max(0, len(m.group(0)) - 16 if "\n" not in m.group(0) else 0)
                     + "\n" * m.group(0).count("\n"), out)
    pieces, pos = [], 0
    for m in _COPY.finditer(out):
        if m.start() < pos:
            continue
        got = _args(out, m.end() - 1)
        if got is None or len(got[0]) != 4:
            issues.append(Issue(construct="cuda::memcpy_async", line=line_of(m.start()), severity="error",
                                message="a group's collective memcpy_async is not translated; port it as plain "
                                        "copies followed by a barrier"))
            return parse_result
        (dst, srcp, size, _obj), after = got
        semi = re.compile(r"\s*;").match(out, after)
        stop = semi.end() if semi else after
        copy = (f"for (unsigned int ks_c = 0; ks_c < (unsigned int)({size}) / (unsigned int)sizeof(*({dst})); "
                f"ks_c++) ({dst})[ks_c] = ({srcp})[ks_c];")
        pieces.append(out[pos:m.start()] + copy + "\n" * out[m.start():stop].count("\n"))
        pos = stop
    out = "".join(pieces) + out[pos:]
    left = re.search(r"\bcuda::(?:pipeline|barrier|memcpy_async|make_pipeline)\b|\b(?:" + "|".join(
        map(re.escape, pipes + bars)) + r")\s*\.", out) if pipes or bars else None
    if left:
        issues.append(Issue(construct=left.group(0), line=line_of(left.start()), severity="error",
                            message="this use of a cuda::pipeline / cuda::barrier is not translated (only copies, "
                                    "producer/consumer calls and arrive_and_wait are); port it by hand"))
        return parse_result
    new = with_kernel_body(parse_result, kernel_name, out)
    if new is parse_result:
        return parse_result
    issues.append(Issue(construct="cuda::memcpy_async", line=line0, severity="info",
                        message="asynchronous copies are plain copies in both ports (done at issue; the kernel waits "
                                "for each batch before the next, so it computes the same)"))
    return new
