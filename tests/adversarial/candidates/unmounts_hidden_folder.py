"""Attack: the secret folder is only covered by a mount in the worker's namespace, so unmount the cover
(through libc) and read the key underneath ($KEY). Caught by: the worker no longer has the privilege to
unmount (root drops to a uid of its own; a user's worker locks its mounts in a nested user namespace)."""
import ctypes

libc = ctypes.CDLL(None, use_errno=True)


def kernel(x):
    rc = libc.umount2(b"$DIR", 2)   # MNT_DETACH
    err = ctypes.get_errno()
    try:
        secret = open("$KEY").read()
    except OSError:
        secret = ""
    raise RuntimeError(f"UMOUNT rc={rc} errno={err} SECRET {secret!r}")
