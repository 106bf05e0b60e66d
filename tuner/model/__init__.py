"""Whole-model tuning from ONNX: read a model (`graph`), find its tunable subgraphs as
deduplicated workloads (`patterns`, `extract`), their constant weights pre-packed for a
target (`prepack`)."""

from .extract import Extraction, Task, UntunedNode, extract_tasks
from .graph import ModelError, ModelGraph, Problem, load_model, parse_input_shape
from .patterns import Binding, Match
from .prepack import prepack_weights

__all__ = ["Binding", "Extraction", "Match", "ModelError", "ModelGraph", "Problem", "Task",
           "UntunedNode", "extract_tasks", "load_model", "parse_input_shape", "prepack_weights"]
