"""skeinbench: the skein vs sshfs benchmark behind tests/bench/run.

harness   the run: set-up, the workloads in order, failures, clean-up
systems   what a workload measures on: the skein-local cluster, sshfs mounts, delay relays
report    rows of figures, the markdown table, the JSON copy and the plots
workloads one module per workload (see workloads/__init__.py for what a module declares)
"""
