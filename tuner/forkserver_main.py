"""Imported by the measurement fork server only (:data:`.processes.PRELOAD`): runs the parent's
main module there, once, so that the processes forked from it do not each run it again.

A process that multiprocessing starts re-runs its parent's main script (as ``__mp_main__``)
unless the main module it inherits is already that script. The fork server was meant to run it
once for all of them when ``"__main__"`` is preloaded, but CPython passes the fork server no
path for it (a key renamed in Python 3.4 but not in the fork server: python/cpython#98552, fixed
by #126631 only in recent releases), so on the Pythons we support every builder and measurement
process ran the whole main script, imports and all. From a script that had imported PyTorch,
onnxruntime and onnx (as a user's model-tuning script does), each measurement child took
1.2-2.1 s to start instead of 0.01-0.05 s (AMD Zen 4).

:func:`.processes.context` puts the parent's main module and ``sys.argv`` (as
``multiprocessing.spawn.get_preparation_data`` gives them) in :data:`.processes.MAIN_ENV_VAR`
before the fork server starts; here they are prepared as each child would prepare them. Where
the main module raises, nothing changes: the children run it and report what it raises, as
before.
"""

import json
import os

from multiprocessing import process, spawn

from .processes import MAIN_ENV_VAR


def _preload_main() -> None:
    data = json.loads(os.environ.get(MAIN_ENV_VAR) or "{}")
    if not data:
        return
    current = process.current_process()
    # As multiprocessing's own preload and spawned children do: a main script that starts
    # processes while it is imported (no `if __name__ == "__main__":`) raises instead.
    current._inheriting = True
    try:
        spawn.prepare(data)
    except Exception:  # the main module's own error: each child meets it, as before
        pass
    finally:
        del current._inheriting


_preload_main()
