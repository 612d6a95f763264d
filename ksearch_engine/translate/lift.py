"""Struct parameters whose pointer fields the kernel follows: each followed field becomes a buffer parameter of
its own in both ports.

`struct Item { char *name; int value; }; __global__ void k(Item *it) { it->name[0] = 'd'; it->value++; }` and
`struct Params { const float *x; float *y; int n; }; __global__ void axpy(Params p)` hold addresses of the
program's memory, which mean nothing to the ports (MLX hands them buffers of their own). The ports take the struct
as before (its pointer fields as 64-bit words they never read) plus one buffer per followed field, named
`<param>_<field>` and placed after the kernel's own parameters; the kernel's `it->name` / `p.y` / `(*it).name` /
`it[0].name` read that buffer. The capture records what each pointer field points to (LaunchRecord.embedded: the
argument, the field's byte offset), which is what the check hands the port for it.

Lifted only where that is exact: a pointer to one struct (never indexed past its first), by value or by reference;
fields followed in the kernel's own body (not in helpers it passes the struct to), one level of pointers, a struct
the file defines. Anything else keeps the translator's error naming the field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..source.models import KernelInfo, Param, ParseResult
from .launch import norm_type, struct_body

WORD = "unsigned long long"   # a pointer field's 8 bytes, as both ports' headers declare the struct


@dataclass(frozen=True)
class Lift:
    param: str        # the kernel's struct parameter
    field: str        # its pointer field
    name: str         # the buffer parameter both ports take for it
    ctype: str        # the pointee type as the field declares it (`const float`)
    struct: str
    at: int = 0       # the field's byte offset in the struct (C layout)


def _pointer_fields(body: str) -> list[tuple[str, str, str]]:
    """[(field, pointee type, the declaration)] of a struct body's one-level pointer fields, each declared alone
    (`const float *x;`); a declaration of several names with a pointer among them gives ("", "", decl)."""
    from .layout import _data_members, _split_declarators
    out = []
    for decl in _data_members(body):
        parts = _split_declarators(decl)
        if "*" not in decl:
            continue
        m = re.fullmatch(r"((?:const\s+|volatile\s+)*[A-Za-z_][\w:]*(?:\s+[A-Za-z_]\w*)*)\s*\*\s*"
                         r"(?:__restrict__\s+|const\s+)*([A-Za-z_]\w*)", parts[0].strip())
        if len(parts) != 1 or m is None:
            out.append(("", "", decl))
            continue
        out.append((m.group(2), " ".join(m.group(1).split()), decl))
    return out


def _uses(name: str, field: str) -> str:
    """A pattern for `name->field`, `name.field`, `(*name).field`, `name[0].field` (not `x.name.field`)."""
    n, f = re.escape(name), re.escape(field)
    return (rf"(?:\(\s*\*\s*{n}\s*\)\s*\.|(?<![\w.>]){n}\s*\[\s*0\s*\]\s*\.|(?<![\w.>]){n}\s*->|"
            rf"(?<![\w.>]){n}\s*\.)\s*{f}\b")


def plan_lifts(k: KernelInfo, preamble: list[str], helper_texts: list[str]) -> list[Lift]:
    """The followed pointer fields of the kernel's struct parameters that can be lifted (see the module)."""
    lifts: list[Lift] = []
    taken = {p.name for p in k.params} | set(re.findall(r"\b[A-Za-z_]\w*\b", k.body))
    helpers = "\n".join(helper_texts)
    for p in k.params:
        if p.pointer and (p.text or "").count("*") > 1:
            continue
        base = norm_type(p.type)
        body = struct_body(base, preamble)
        if body is None or not _empty_bases(base, preamble):
            continue   # not a struct of the file, or derived from one holding data (not placed here)
        fields = _pointer_fields(body)
        followed = [(f, t) for f, t, _ in fields if f and re.search(_uses(p.name, f), k.body)]
        if not followed or any(not f for f, _, _ in fields):
            continue
        if any(re.search(rf"(?:->|\.)\s*{re.escape(f)}\b", helpers) for f, _, _ in fields):
            continue   # a helper follows one: the struct travels on, the buffer would not
        if p.pointer and re.search(rf"(?<![\w.>]){re.escape(p.name)}\s*\[\s*(?!0\s*\])", k.body):
            continue   # an array of structs: each element's pointer is its own buffer
        for f, t in followed:
            name = f"{p.name}_{f}"
            while name in taken:
                name += "_"
            taken.add(name)
            lifts.append(Lift(param=p.name, field=f, name=name, ctype=t, struct=base))
    return lifts


def _empty_bases(name: str, preamble: list[str]) -> bool:
    """Struct `name` derives from nothing, or only from classes of the file without data members or virtual
    functions (`struct Elem : public Managed`, a base giving `operator new`): they add no bytes to its layout."""
    from .layout import _data_members, _virtual
    m = re.search(rf"\b(?:struct|class)\s+{re.escape(name)}\s*(?:final\s*)?:(?!:)([^{{;]*)\{{", "\n".join(preamble))
    if m is None:
        return True
    for b in m.group(1).split(","):
        bname = re.sub(r"\b(?:public|private|protected|virtual)\b", " ", b).strip()
        body = struct_body(bname, preamble) if re.fullmatch(r"[A-Za-z_]\w*", bname) else None
        if body is None or _data_members(body) or _virtual(body) or not _empty_bases(bname, preamble):
            return False
    return True


def words_for_pointers(preamble: list[str], structs: set[str]) -> list[str]:
    """The preamble with every pointer field of `structs` declared as an 8-byte word (the ports never follow it)."""
    out = []
    for entry in preamble:
        for s in structs:
            body = struct_body(s, [entry])
            if body is None:
                continue
            new = body
            for f, _, decl in _pointer_fields(body):
                new = re.sub(rf"[^;{{}}]*\*\s*(?:__restrict__\s+|const\s+)*{re.escape(f)}\s*;",
                             lambda m: ("\n" if m.group(0).startswith("\n") else " ") + f"{WORD} {f};", new, count=1)
            entry = entry.replace(body, new, 1)
        out.append(entry)
    return out


def apply_lifts(k: KernelInfo, parse_result: ParseResult, lifts: list[Lift]) -> tuple[KernelInfo, ParseResult,
                                                                                       list[Lift]]:
    """The kernel reading each lifted field through its buffer parameter (appended to its parameters), the
    file's structs with their pointer fields as words, and the lifts with their fields' byte offsets."""
    from .layout import LayoutError, struct_layout
    structs = {lf.struct for lf in lifts}
    preamble = words_for_pointers(parse_result.preamble, structs)
    placed = []
    for lf in lifts:
        try:
            dt = struct_layout(lf.struct, preamble).dtype
            at = dt.fields[lf.field][1]
        except (LayoutError, KeyError, TypeError):
            continue
        placed.append(Lift(**{**lf.__dict__, "at": at}))
    if not placed:
        return k, parse_result, []

    def sub(text: str) -> str:
        for lf in placed:
            text = re.sub(_uses(lf.param, lf.field), lf.name, text)
        return text

    cut = k.text.find("{")
    text = k.text if cut < 0 else k.text[:cut] + sub(k.text[cut:])
    extra = [Param(name=lf.name, type=re.sub(r"^(?:const|volatile)\s+", "", lf.ctype),
                   qualifiers=["const"] if lf.ctype.startswith("const") else [], pointer=True,
                   text=f"{lf.ctype}* {lf.name}") for lf in placed]
    k2 = k.model_copy(update={"body": sub(k.body), "text": text, "params": list(k.params) + extra})
    kernels = [k2 if x is k or x.name == k.name else x for x in parse_result.kernels]
    return k2, parse_result.model_copy(update={"preamble": preamble, "kernels": kernels}), placed
