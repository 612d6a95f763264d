"""Attack: fill /tmp (the host's, shared with everything). Caught by: the child's /tmp is a private,
size-limited tmpfs; the attack stops at its size and reports how far it got."""
import os


def kernel(x):
    block = b"\0" * (1 << 20)
    written = 0
    try:
        with open("/tmp/ksearch-fill.bin", "wb") as f:
            while True:
                f.write(block)
                f.flush()
                written += 1
    except OSError as e:
        raise RuntimeError(f"WROTE {written} MB to /tmp: {e.strerror}") from None
