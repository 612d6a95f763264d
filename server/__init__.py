"""ksearch's language server (installed as `ksearch_server`): kernels found in open files and on disk, Port
to MLX / Optimize as background jobs, results as diffs, lenses, inlay hints and hovers."""
