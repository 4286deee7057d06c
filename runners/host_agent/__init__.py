"""`engram-bench agent`: the serving host's kernel counters at /metrics, for a harness that
runs elsewhere. It reads only the kernel and needs only the core install (no torch, no numpy:
runners.engram is never imported). One module a source: processes (the serving process
tree), residency and tables (each table file's page-cache residency), block_devices
(/proc/diskstats), system (vmstat, meminfo, PSI); collector turns them into metric families,
server serves them, agent puts them together from the flags."""
