"""Attack: search every temp folder (and the evaluator's own folder) for .npy files: expected outputs of
this or another evaluator. It raises with what it found, so the test can check nothing was findable.
Caught by: the reference files are deleted before candidates run, and each child has private temp folders."""
import json
import os

import mlx.core as mx


def kernel(x):
    found = []
    roots = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", os.path.dirname(os.getcwd())]
    for root in roots:
        for d, _, files in os.walk(root):
            found += [os.path.join(d, f) for f in files if f.endswith(".npy")]
    raise RuntimeError("FOUND " + json.dumps(sorted(set(found))))
