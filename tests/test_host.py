"""Host facts shared by `tunefleet tune` and the worker: CPU lists and the default device key."""

import pytest

from tunefleet.tuner.host import affinity, cpu_model, device_key, format_cpus, parse_cpus


def test_cpu_lists_round_trip_and_stay_inside_the_affinity_mask():
    mask = affinity()
    assert parse_cpus(format_cpus(mask)) == mask
    assert format_cpus([5, 0, 1, 2, 2]) == "0-2,5" and parse_cpus(str(mask[0])) == mask[:1]
    with pytest.raises(ValueError, match="cpus: 'x' is not a CPU number"):
        parse_cpus("0,x")
    with pytest.raises(ValueError, match="cpus: 4096 not in this process's affinity mask"):
        parse_cpus("4096")


def test_device_key_names_the_cpu_model_and_the_cpu_count():
    assert cpu_model("model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n") == "intel-xeon-platinum-8375c"
    assert cpu_model("model name\t: AMD EPYC 7B13 64-Core Processor\n") == "amd-epyc-7b13"
    assert device_key([0]) == f"cpu-{cpu_model()}-1c"
    assert device_key() == f"cpu-{cpu_model()}-{len(affinity())}c"
