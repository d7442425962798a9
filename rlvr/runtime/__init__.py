"""What every layer of rlvr shares with the process and the machine it runs in: files written atomically
(:mod:`.atomic`), the CPU seconds of the process tree (:mod:`.cpu_time`), the ranks of a distributed run and their
collectives (:mod:`.distributed`), where C++ extensions are built (:mod:`.extensions`), and a Ctrl-C that is never
swallowed (:mod:`.interrupts`). It imports nothing else of rlvr but :func:`rlvr.cache_dir`, so any package may
import it."""
