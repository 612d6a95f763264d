"""Evaluate candidate modules in sandboxed child processes: verify against the reference, then time."""
from .evaluator import Evaluator, evaluate_once
from .models import FAILING, EvalResult, Limits, Mismatch, Timing

__all__ = ["Evaluator", "evaluate_once", "EvalResult", "Limits", "Mismatch", "Timing", "FAILING"]
