"""The operator registry: every operator listed with its argument schema and targets; unknown
operators and targets fail with the list of what exists; bad arguments name the field."""

import pytest

from tunefleet.compiler import ops

OPERATORS = {"matmul", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "batch_matmul", "dense", "custom"}


def test_list_gives_every_operator_with_schema_and_targets():
    listed = {op["name"]: op for op in ops.list()}
    assert OPERATORS <= set(listed)
    for op in listed.values():
        assert "cpu" in op["targets"] and op["description"]
        for arg in op["args"]:
            assert set(arg) >= {"name", "type", "default", "min", "max", "choices", "required"}
    conv = {a["name"]: a for a in listed["conv2d_nchw"]["args"]}
    assert conv["stride"]["type"] == "int2" and conv["stride"]["default"] == [1, 1]
    assert conv["epilogue"]["choices"] == ["none", "relu", "gelu"]
    assert {a["name"]: a for a in listed["custom"]["args"]}["te"]["required"]


def test_unknown_operator_lists_the_operators():
    with pytest.raises(ops.WorkloadError, match="conv2d_nchw.*depthwise_conv2d_nchw") as exc:
        ops.make_workload("conv3d", {})
    assert exc.value.field == "op"


def test_unknown_target_lists_the_targets():
    w = ops.make_workload("conv2d_nchw", {"CI": 3, "CO": 8, "H": 8, "W": 8})
    with pytest.raises(ops.WorkloadError, match="no template for 'metal'; available: cpu") as exc:
        w.template("metal")
    assert exc.value.field == "target"


def test_int2_arguments_normalize():
    a = ops.make_workload("conv2d_nchw", {"stride": 2, "padding": [1, 0]})
    b = ops.make_workload("conv2d_nchw", {"stride": [2, 2], "padding": [1, 0]})
    assert a.args["stride"] == [2, 2] and a.key == b.key


@pytest.mark.parametrize("op, args, field, message", [
    ("conv2d_nchw", {"N": -1}, "N", ">= 1"),
    ("conv2d_nchw", {"CI": 0}, "CI", ">= 1"),
    ("conv2d_nhwc", {"H": 2, "W": 9, "KH": 5}, "KH", "larger than the padded input"),
    ("conv2d_nchw", {"H": 9, "W": 2, "KW": 3, "dilation": 2, "padding": [0, 1]}, "KW", "dilated kernel width 5"),
    ("depthwise_conv2d_nchw", {"H": 3, "KH": 2, "dilation": [3, 1]}, "KH", "larger than the padded input"),
    ("conv2d_nchw", {"epilogue": "swish"}, "epilogue", "allowed: none, relu, gelu"),
    ("dense", {"epilogue": "tanh"}, "epilogue", "allowed"),
    ("conv2d_nchw", {"stride": 0}, "stride", ">= 1"),
    ("conv2d_nchw", {"stride": [1, 2, 3]}, "stride", "pair"),
    ("conv2d_nchw", {"padding": [1, -1]}, "padding", "second element must be >= 0"),
    ("conv2d_nchw", {"weight_layout": "NCHW"}, "weight_layout", "OIHW<i>i<o>o"),
    ("conv2d_nchw", {"CI": 12, "weight_layout": "OIHW8i16o"}, "weight_layout", "does not divide CI=12"),
    ("batch_matmul", {"batch": 0}, "batch", ">= 1"),
    ("batch_matmul", {"transpose_b": "yes"}, "transpose_b", "true or false"),
    ("dense", {"K": -3}, "K", ">= 1"),
    ("depthwise_conv2d_nchw", {"groups": 2}, "groups", "unknown argument"),
    ("custom", {}, "te", "required"),
])
def test_bad_arguments_name_the_field(op, args, field, message):
    with pytest.raises(ops.WorkloadError, match=message) as exc:
        ops.make_workload(op, args)
    assert exc.value.field == field
    assert str(exc.value).startswith(f"{field}:")
