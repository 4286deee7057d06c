"""The bundled Engram-offload server: a small real model whose n-gram table lives in device
memory, pinned host RAM or a memory-mapped file, with rows prefetched from token ids."""
