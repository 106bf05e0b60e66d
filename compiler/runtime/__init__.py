"""The C runtime compiled into every CPU artifact (thread pool, parallel-for, timer, DLPack checks)."""
