"""Turns the host side of a CUDA launch into Python: the statements of the host function that precede
`kernel<<<grid, block, smem, stream>>>(args)` and the launch's own expressions.

Only what launch configurations are made of is supported: integer/float declarations and assignments,
`dim3` constructors, arithmetic, `?:`, casts, `sizeof`, `min`/`max`. Anything else raises HostExprError,
which the translator reports with its line.
"""
from __future__ import annotations

import keyword
import re

from ..source.cfamily import parse_bytes

SIZEOF = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "uint": 4, "uint32_t": 4, "int32_t": 4,
          "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "bfloat16": 2, "short": 2,
          "double": 8, "long": 8, "long long": 8, "int64_t": 8, "uint64_t": 8, "size_t": 8,
          "char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1,
          "float2": 8, "float4": 16, "int2": 8, "int4": 16, "half2": 4, "__half2": 4}

_CALLS = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "fminf": "min", "fmaxf": "max",
          "ceil": "math.ceil", "ceilf": "math.ceil", "floor": "math.floor", "sqrt": "math.sqrt",
          "sqrtf": "math.sqrt", "rsqrtf": "1.0 / math.sqrt", "dim3": "_dim3", "abs": "abs"}


class HostExprError(ValueError):
    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.line = line


def py_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) or name in ("math", "mx", "kernel", "reference") else name


def _number(text: str) -> str:
    t = text.strip().replace("'", "")
    if t.lower().startswith("0x"):
        return str(int(re.sub(r"[uUlL]+$", "", t), 16))
    t = re.sub(r"[uUlL]+$", "", t)
    if re.search(r"[.eE]", t):
        t = re.sub(r"[fF]$", "", t)
        return repr(float(t))
    return str(int(t, 8) if len(t) > 1 and t.startswith("0") else int(t))


class HostTranslator:
    """Translates tree-sitter nodes of host code into Python expressions/statements."""

    def __init__(self, data: bytes, line_offset: int = 0, functions: set[str] | frozenset = frozenset()):
        self.data = data
        self.line_offset = line_offset
        self.functions = functions   # host helpers / function-like macros the port defines in Python

    def text(self, node) -> str:
        return self.data[node.start_byte:node.end_byte].decode("utf-8", errors="replace")

    def fail(self, node, what: str):
        raise HostExprError(f"cannot evaluate `{self.text(node).strip()}` in the launch configuration ({what})",
                            node.start_point[0] + self.line_offset)

    def expr(self, node) -> str:
        try:
            return self._expr(node)
        except RecursionError:
            raise HostExprError("expression nested too deeply to evaluate",
                                node.start_point[0] + self.line_offset) from None

    def _expr(self, node) -> str:
        t = node.type
        if t == "number_literal":
            return _number(self.text(node))
        if t in ("true", "false"):
            return "True" if t == "true" else "False"
        if t == "identifier":
            return py_name(self.text(node))
        if t == "qualified_identifier":
            return py_name(self.text(node).split("::")[-1])
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            return "(" + self.expr(inner[0]) + ")"
        if t == "binary_expression":
            op = self.text(node.child_by_field_name("operator"))
            a = self.expr(node.child_by_field_name("left"))
            b = self.expr(node.child_by_field_name("right"))
            if op == "/":
                return f"_cdiv({a}, {b})"
            if op == "%":
                return f"_cmod({a}, {b})"
            op = {"&&": "and", "||": "or"}.get(op, op)
            return f"{a} {op} {b}"
        if t == "unary_expression":
            op = self.text(node.child_by_field_name("operator"))
            arg = self.expr(node.child_by_field_name("argument"))
            return f"(not {arg})" if op == "!" else f"{op}{arg}"
        if t == "conditional_expression":
            c = self.expr(node.child_by_field_name("condition"))
            a = self.expr(node.child_by_field_name("consequence"))
            b = self.expr(node.child_by_field_name("alternative"))
            return f"({a} if {c} else {b})"
        if t == "cast_expression":
            ty = self.text(node.child_by_field_name("type")).strip()
            v = self.expr(node.child_by_field_name("value"))
            return f"float({v})" if ty in ("float", "double") else f"int({v})"
        if t == "sizeof_expression":
            ty = node.child_by_field_name("type")
            name = " ".join(self.text(ty).split()) if ty is not None else ""
            if name in SIZEOF:
                return str(SIZEOF[name])
            if not name:   # `sizeof(q4f)`: a name the parser reads as an expression (a typedef of a class)
                v = node.child_by_field_name("value")
                name = " ".join(self.text(v).split()).strip("() ") if v is not None else ""
            self.fail(node, f"unknown size of `{name}`: this reads only scalar and CUDA vector sizes; "
                            "write the byte count there or set it in launch_config()")
        if t == "call_expression":
            fn = node.child_by_field_name("function")
            args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
            if fn.type == "template_function":
                name = self.text(fn.child_by_field_name("name"))
                targs = fn.child_by_field_name("arguments")
                if name in ("static_cast", "reinterpret_cast") and targs is not None:
                    ty = self.text(targs).strip("<> ")
                    v = self.expr(args[0])
                    return f"float({v})" if ty in ("float", "double") else f"int({v})"
                if name in ("std::min", "std::max", "min", "max"):
                    fname = name.split("::")[-1]
                    return f"{fname}(" + ", ".join(self.expr(a) for a in args) + ")"
                self.fail(node, f"call of `{name}`")
            name = self.text(fn)
            if name in _CALLS:
                return f"{_CALLS[name]}(" + ", ".join(self.expr(a) for a in args) + ")"
            if name in self.functions:
                return f"{py_name(name)}(" + ", ".join(self.expr(a) for a in args) + ")"
            self.fail(node, f"call of a host function `{name}` that ksearch does not evaluate")
        if t == "initializer_list":
            return "_dim3(" + ", ".join(self.expr(a) for a in node.named_children) + ")"
        if t == "comma_expression":
            self.fail(node, "comma expression")
        self.fail(node, f"unsupported expression kind `{t}`")
        return ""  # unreachable

    def statement(self, node) -> list[str]:
        """Python lines for one host statement, [] to skip it. Raises HostExprError when it matters."""
        t = node.type
        if t == "declaration":
            ty = self.text(node.child_by_field_name("type")).strip() if node.child_by_field_name("type") else ""
            lines = []
            for d in node.children_by_field_name("declarator"):
                if d.type == "init_declarator":
                    name_node = d.child_by_field_name("declarator")
                    while name_node is not None and name_node.type not in ("identifier",):
                        name_node = name_node.child_by_field_name("declarator")
                    if name_node is None:
                        continue
                    name = py_name(self.text(name_node))
                    value = d.child_by_field_name("value")
                    if value is None:
                        continue
                    if value.type == "argument_list":     # dim3 grid(a, b)
                        args = [a for a in value.named_children if a.type != "comment"]
                        lines.append(f"{name} = _dim3(" + ", ".join(self.expr(a) for a in args) + ")")
                    elif value.type == "initializer_list":
                        lines.append(f"{name} = _dim3(" + ", ".join(self.expr(a) for a in value.named_children) + ")")
                    else:
                        v = self.expr(value)
                        if ty == "dim3":
                            v = f"_dim3({v})"
                        elif ty in ("float", "double"):
                            v = f"float({v})"
                        elif ty in ("int", "unsigned", "unsigned int", "size_t", "int64_t", "long", "uint32_t"):
                            v = f"int({v})"
                        lines.append(f"{name} = {v}")
                elif d.type == "function_declarator":    # `dim3 block(TILE, TILE);` parses as a declaration
                    params = d.child_by_field_name("parameters")
                    args = [self.text(a) for a in params.named_children if a.type != "comment"]
                    name = py_name(self.text(d.child_by_field_name("declarator")))
                    line = d.start_point[0] + self.line_offset
                    lines.append(f"{name} = _dim3(" + ", ".join(expr_to_py(a, line, self.functions) for a in args) + ")")
                elif ty == "dim3" and d.type == "identifier":
                    lines.append(f"{py_name(self.text(d))} = _dim3(1)")
            return lines
        if t == "expression_statement":
            inner = node.named_children[0] if node.named_children else None
            if inner is not None and inner.type == "assignment_expression":
                left = inner.child_by_field_name("left")
                if left.type != "identifier":
                    return []
                op = self.text(inner.child_by_field_name("operator"))
                right = self.expr(inner.child_by_field_name("right"))
                name = py_name(self.text(left))
                if op == "=":
                    return [f"{name} = {right}"]
                base = op[:-1]
                if base == "/":
                    return [f"{name} = _cdiv({name}, {right})"]
                return [f"{name} {op} {right}"]
            return []
        return []


def host_prelude(host_text: str, launch_start: int, line_offset: int,
                 functions: set[str] | frozenset = frozenset()) -> tuple[list[str], list[tuple[int, str]]]:
    """Python lines for the host function's statements before byte `launch_start` (relative to host_text),
    plus [(line, why)] for statements that were skipped."""
    data = host_text.encode()
    root = parse_bytes(data, "cuda").root_node
    fn = next((c for c in root.children if c.type == "function_definition"), None)
    if fn is None:
        return [], []
    body = fn.child_by_field_name("body")
    tr = HostTranslator(data, line_offset, functions)
    lines, skipped = [], []
    for st in body.named_children:
        if st.start_byte >= launch_start:
            break
        if st.end_byte > launch_start:   # the launch sits inside this statement (if/for/...): enter it
            if st.type in ("if_statement", "compound_statement"):
                inner = st.child_by_field_name("consequence") or st
                for s2 in (inner.named_children if inner.type == "compound_statement" else []):
                    if s2.start_byte >= launch_start:
                        break
                    try:
                        lines += tr.statement(s2)
                    except HostExprError as e:
                        skipped.append((e.line, str(e)))
            break
        try:
            lines += tr.statement(st)
        except HostExprError as e:
            skipped.append((e.line, str(e)))
    return lines, skipped


def expr_to_py(text: str, line: int = 0, functions: set[str] | frozenset = frozenset()) -> str:
    """Python for one C expression given as text (launch configuration and kernel arguments)."""
    data = f"void __f() {{ __x = {text}; }}".encode()
    root = parse_bytes(data, "cuda").root_node
    node = root
    while node is not None and node.type != "assignment_expression":
        node = node.named_children[0] if node.named_children else None
        if node is not None and node.type == "function_definition":
            node = node.child_by_field_name("body")
    if node is None or root.has_error:
        raise HostExprError(f"cannot read the expression `{text}`", line)
    return HostTranslator(data, line, functions).expr(node.child_by_field_name("right"))


def host_functions(source: bytes, preamble: list[str]) -> dict[str, str]:
    """{name: python `lambda`} for function-like macros and one-line host helpers such as
    `inline int cdiv(int a, int b) { return (a + b - 1) / b; }` that launch configurations call."""
    out: dict[str, str] = {}
    for line in preamble:
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)\s+(.+?)\s*$", line)
        if m:
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            try:
                out[m.group(1)] = f"lambda {', '.join(map(py_name, params))}: {expr_to_py(m.group(3), 0, set(out))}"
            except HostExprError:
                continue
    root = parse_bytes(source, "cuda").root_node
    for fn in root.children:
        if fn.type != "function_definition":
            continue
        toks = {source[c.start_byte:c.end_byte].decode() for c in fn.children if not c.is_named}
        if "__global__" in toks or ("__device__" in toks and "__host__" not in toks):
            continue
        body = fn.child_by_field_name("body")
        stmts = [c for c in (body.named_children if body is not None else []) if c.type != "comment"]
        if len(stmts) != 1 or stmts[0].type != "return_statement" or not stmts[0].named_children:
            continue
        d = fn.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
        if d is None:
            continue
        name = source[d.child_by_field_name("declarator").start_byte:d.child_by_field_name("declarator").end_byte].decode()
        params = []
        for p in d.child_by_field_name("parameters").named_children:
            pd = p.child_by_field_name("declarator")
            if pd is None or pd.type != "identifier":
                params = None
                break
            params.append(source[pd.start_byte:pd.end_byte].decode())
        if params is None:
            continue
        try:
            expr = HostTranslator(source, 0, set(out) | {name}).expr(stmts[0].named_children[0])
        except HostExprError:
            continue
        out[name] = f"lambda {', '.join(map(py_name, params))}: {expr}"
    return out
