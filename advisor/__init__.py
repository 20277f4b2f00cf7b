"""advise: a workload profiler and advisor for vLLM.

The pipeline, one module or subpackage per stage:
ingest (logs -> `Request`) -> tokenize (`Request` -> token ids, as vLLM sees them) -> measure (pure
statistics and exact replays) -> engine (recommendation) -> emit (configs, checklist) -> verify (real A/B).

`import advisor` stays light: heavy libraries (transformers, matplotlib) load only when a stage needs them.
"""
from advisor.errors import AdvisorError
from advisor.record import Message, Request, SamplingParams

__version__ = "0.1.0"
__all__ = ["AdvisorError", "Message", "Request", "SamplingParams", "__version__"]
