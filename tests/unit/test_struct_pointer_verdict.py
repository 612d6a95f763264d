"""A kernel that follows a pointer stored in a struct (`elem->label[0] = ...`, `n->next->v`): the address is one of
the program's memory, which the ports never see (MLX hands them buffers of their own). Where the kernel itself follows
the field of one struct, the field becomes a buffer of the ports' own, given what the program's pointer pointed to
(translate/lift.py); elsewhere (a helper follows it, a linked structure) the port is refused with the struct, the
field and its line named, never run into a memory fault in the simulator. A kernel that only reads the struct's other
fields is ported and checked.

Every kernel here is small CUDA written for this test; the checks run the real simulator."""
from __future__ import annotations

from pathlib import Path

from ksearch_engine.portfile import port_file

ITEM = """
#include <stdio.h>
#include <string.h>

struct Item
{
  int count;
  char *label;
};
"""

PROGRAM = """
int main(void)
{
  Item *it;
  cudaMallocManaged((void**)&it, sizeof(Item));
  it->count = 3;
  cudaMallocManaged((void**)&(it->label), 8);
  strcpy(it->label, "abc");
  bump<<<1, 1>>>(it);
  cudaDeviceSynchronize();
  printf("%s %d\\n", it->label, it->count);
  cudaFree(it->label);
  cudaFree(it);
  return 0;
}
"""


def _one(tmp_path: Path, name: str, text: str, kernel: str | None = None, headers: dict | None = None):
    for h, t in (headers or {}).items():
        (tmp_path / h).write_text(t)
    f = tmp_path / name
    f.write_text(text)
    r = port_file(f, write=False)
    return next(v for v in r.kernels if kernel is None or v.kernel == kernel)


def test_kernel_writing_through_a_struct_pointer_field_takes_the_field_as_a_buffer(tmp_path):
    # `recount` reads the same struct without following its pointer: its bytes travel as they are, and it is ported
    f = tmp_path / "items.cu"
    f.write_text(ITEM + """
__global__ void bump(Item *it) {
  it->label[0] = 'z';
  it->count++;
}
__global__ void recount(Item *it) {
  it->count += 2;
}
""" + PROGRAM.replace("bump<<<1, 1>>>(it);", "bump<<<1, 1>>>(it);\n  recount<<<1, 1>>>(it);"))
    r = {v.kernel: v for v in port_file(f, write=False).kernels}
    v = r["bump"]
    assert v.status == "verified" and v.workload == "captured", (v.status, v.reason)
    assert any("'it_label'" in n and "Item::label" in n for n in v.notes), v.notes
    assert r["recount"].status == "verified", r["recount"].reason


def test_pointer_followed_in_a_helper_and_struct_in_a_header(tmp_path):
    # the helper follows it; the struct is in a local header, whose line is named
    v = _one(tmp_path, "nodes.cu", """
#include "node.h"
__device__ float head_value(const Node* n) { return n->next->value; }
__global__ void sum_next(const Node* nodes, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = nodes[i].value + head_value(&nodes[i]);
}
""", headers={"node.h": "#pragma once\nstruct Node {\n  float value;\n  Node* next;\n};\n"})
    assert v.status == "not_ported", (v.status, v.reason)
    assert "struct Node holds a pointer (field next, node.h line 4)" in v.reason, v.reason


def test_pointer_inside_a_nested_struct_is_named(tmp_path):
    v = _one(tmp_path, "nested.cu", """
struct Span { int n; float* data; };
struct Job { int id; struct Span span; };
__global__ void clear(Job* jobs, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && jobs[i].span.n > 0) jobs[i].span.data[0] = 0.f;
}
""")
    assert v.status == "not_ported", (v.status, v.reason)
    assert "struct Span holds a pointer (field data, nested.cu line 2)" in v.reason, v.reason


def test_a_pointer_followed_inside_a_member_class_is_named_and_a_reference_is_called_one(tmp_path):
    # the unified-memory String idiom: DataElement holds a String whose `char* data` its operator[] follows
    # (`elem->name[0]`), so the kernel follows a program address through a member function; a parameter taken
    # by reference is said to be passed by reference
    from ksearch_engine.portfile import port_file
    (tmp_path / "de.cu").write_text(
        "struct String {\n  int length;\n  char *data;\n"
        "  __host__ __device__ char& operator[](int pos) { return data[pos]; }\n};\n"
        "struct DataElement {\n  String name;\n  int value;\n};\n"
        "__global__ void by_pointer(DataElement *elem) { elem->name[0] = 'p'; elem->value++; }\n"
        "__global__ void by_ref(DataElement &elem) { elem.value++; }\n")
    rep = port_file(tmp_path / "de.cu", write=False)
    got = {v.kernel: v for v in rep.kernels}
    assert got["by_pointer"].status == "not_ported"
    assert "struct String holds a pointer (field data" in got["by_pointer"].reason
    assert "the kernel follows that pointer" in got["by_pointer"].reason
    assert "passed by reference" in got["by_ref"].reason, got["by_ref"].reason
