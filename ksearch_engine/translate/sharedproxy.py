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


_TYPE = r"(?P<type>(?:(?:const|volatile|unsigned|signed|long|short)\s+)*[A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?(?:\s+(?:const|volatile))*)"


def _temporary_call(name: str):
    """`T *s = Proxy<T>().getPointer();`"""
    return re.compile(_TYPE + r"\s*\*\s*(?:__restrict__\s+)?(?P<var>[A-Za-z_]\w*)\s*=\s*(?:\([^;()]*\)\s*)?"
                      + re.escape(name) + r"\s*<\s*[^;<>]+?\s*>\s*\(\s*\)\s*\.\s*[A-Za-z_]\w*\s*\(\s*\)\s*;")


def _object_form(body: str, name: str) -> str:
    """`Proxy<T> smem;` then `T *s = smem.getPointer();` (or `= smem;`): the object's declaration goes (spaces, the
    same lines) and the pointer becomes the extern array."""
    for m in list(re.finditer(r"(?<![\w:])" + re.escape(name) + r"\s*<\s*[^;<>]+?\s*>\s+(?P<obj>[A-Za-z_]\w*)\s*;",
                              body)):
        obj = m.group("obj")
        use = re.compile(_TYPE + r"\s*\*\s*(?:__restrict__\s+)?(?P<var>[A-Za-z_]\w*)\s*=\s*(?:\([^;()]*\)\s*)?"
                         + re.escape(obj) + r"(?:\s*\.\s*[A-Za-z_]\w*\s*\(\s*\))?\s*;")
        rest = body[m.end():]
        if not use.search(rest):
            continue
        uses = len(re.findall(r"\b" + re.escape(obj) + r"\b", rest))
        new_rest = use.sub(lambda u: f"extern __shared__ {u.group('type').strip()} {u.group('var')}[];", rest)
        if len(re.findall(r"\b" + re.escape(obj) + r"\b", new_rest)) and uses:   # the object is used otherwise too
            continue
        blank = re.sub(r"[^\n]", " ", m.group(0))
        body = body[:m.start()] + blank + new_rest
    return body


def port_shared_proxies(parse_result, kernel_name: str, extra_texts: list[str] | tuple = ()):
    """parse_result with `kernel_name`'s `T *s = Proxy<T>();` declarations (also `Proxy<T> o; T *s =
    o.getPointer();`) as `extern __shared__ T s[];` (same lines); the same parse_result when the kernel has none.
    `extra_texts`: the local headers the file includes (where NVIDIA's samples define the proxy)."""
    k = parse_result.kernel(kernel_name)
    if k is None or "<" not in k.body:
        return parse_result
    names = proxy_names([parse_result.source] + list(parse_result.preamble) + list(extra_texts))
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
        changed = _temporary_call(n).sub(
            lambda m: f"extern __shared__ {m.group('type').strip()} {m.group('var')}[];", changed)
        changed = _object_form(changed, n)
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
