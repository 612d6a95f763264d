"""Attack: write one endless file. Caught by: RLIMIT_FSIZE (the write fails with EFBIG; Python ignores
SIGXFSZ)."""


def kernel(x):
    block = b"\0" * (1 << 20)
    with open("big.bin", "wb") as f:
        while True:
            f.write(block)
