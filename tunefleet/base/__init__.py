"""The shared base: what the tuner, the server, the worker and the CLI all may import, and
that imports nothing of theirs (only the compiler, whose artifacts :mod:`.load` loads).

- :mod:`.settings`: the service processes' configuration (``TUNEFLEET_*`` variables);
- :mod:`.load`: an artifact as a Python callable (``tunefleet.load``), and :mod:`.dltensor`:
  DLPack's DLTensor as ctypes structures, for its ``<name>_checked`` entry point;
- :mod:`.redisconn`, :mod:`.rqworker`: Redis connections that ride out outages and the RQ
  worker class, shared by the tuner process (``tunefleet.server``) and the measurement
  worker (``tunefleet.worker``), which must not import each other;
- :mod:`.version`: tunefleet's version.

Nothing is imported here: each module brings its own dependencies (pydantic, redis, rq).
"""
