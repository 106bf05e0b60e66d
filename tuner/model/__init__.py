"""Whole-model tuning from ONNX: read a model (`graph`; an untrusted one in a bounded child process:
`isolate`), find its tunable subgraphs as
deduplicated workloads (`patterns`, `extract`), their constant weights pre-packed for a
target (`prepack`)."""

from .extract import Extraction, Task, UntunedNode, extract_tasks
from .graph import ModelError, ModelGraph, Problem, load_model, parse_input_shape
from .isolate import load_model_isolated
from .patterns import Binding, Match
from .prepack import prepack_weights

__all__ = ["Binding", "Extraction", "Match", "ModelError", "ModelGraph", "Problem", "Task",
           "UntunedNode", "extract_tasks", "load_model", "load_model_isolated", "parse_input_shape",
           "prepack_weights"]
