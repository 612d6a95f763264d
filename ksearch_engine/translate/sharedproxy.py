"""Dynamic shared memory reached through a proxy struct (NVIDIA's samples: `T *sdata = SharedMemory<T>();`, whose
conversion operator returns an `extern __shared__` array): the kernel's declaration becomes the extern array itself
(`extern __shared__ T sdata[];`), which both ports translate like any dynamic shared array."""
from __future__ import annotations

import re

from ..launchsites import balanced

_STRUCT = re.compile(r"\b(?:struct|class)\s+([A-Za-z_]\w*)\s*(?:<[^;{}]*>)?\s*\{")


def proxy_names(texts: list[str]) -> set[str]:
    """Names of structs whose body declares an `extern __shared__` array (what their conversion returns)."""
    out: set[str] = set()
    for text in texts:
        for m in _STRUCT.finditer(text):
            close = balanced(text, m.end() - 1, "{", "}")
            i = close - 1 if close > 0 else len(text)
            if re.search(r"\bextern\s+__shared__\b", text[m.end():i]):
                out.add(m.group(1))
    return out


def _declaration(name: str):
    return re.compile(r"(?P<type>(?:(?:const|volatile)\s+)*[A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?(?:\s+(?:const|volatile))*)"
                      r"\s*\*\s*(?:__restrict__\s+)?(?P<var>[A-Za-z_]\w*)\s*=\s*(?:\([^;()]*\)\s*)?"
                      + re.escape(name) + r"\s*<\s*(?P<arg>[^;<>]+?)\s*>\s*\(\s*\)\s*;")


def port_shared_proxies(parse_result, kernel_name: str):
    """parse_result with `kernel_name`'s `T *s = Proxy<T>();` declarations as `extern __shared__ T s[];` (same
    lines); the same parse_result when the kernel has none."""
    k = parse_result.kernel(kernel_name)
    if k is None or "<" not in k.body:
        return parse_result
    names = proxy_names([parse_result.source] + list(parse_result.preamble))
    names = {n for n in names if re.search(r"\b" + re.escape(n) + r"\s*<", k.body)}
    if not names:
        return parse_result
    src = parse_result.source.encode()
    start, end = k.byte_range
    body = src[start:end].decode("utf-8", "replace")
    changed = body
    for n in sorted(names):
        changed = _declaration(n).sub(lambda m: f"extern __shared__ {m.group('type').strip()} {m.group('var')}[];",
                                      changed)
    if changed == body:
        return parse_result
    return with_kernel_body(parse_result, kernel_name, changed)


def with_kernel_body(parse_result, kernel_name: str, body: str):
    """`parse_result` re-parsed with kernel `kernel_name`'s text replaced by `body` (a rewrite of it), keeping the
    preamble entries and helpers that came from elsewhere (the program's and local headers'); `parse_result`
    itself when the rewrite no longer parses as that kernel."""
    from ..source import find_kernels

    k = parse_result.kernel(kernel_name)
    src = parse_result.source.encode()
    start, end = k.byte_range
    text = (src[:start] + body.encode() + src[end:]).decode("utf-8", "replace")
    new = find_kernels(text, parse_result.path)
    if new.kernel(kernel_name) is None:
        return parse_result
    own = set(find_kernels(parse_result.source, parse_result.path).preamble)
    extra = [e for e in parse_result.preamble if e not in own]   # the program's and headers' preamble
    new.preamble = extra + [e for e in new.preamble if e not in extra]
    own_helpers = {h.name for h in new.helpers}
    new.helpers = [h for h in parse_result.helpers if h.name not in own_helpers] + new.helpers
    return new
