"""tunefleet.compiler: tensor expressions, schedules, config spaces, lowering, C/CUDA code generation, builds, artifacts."""
