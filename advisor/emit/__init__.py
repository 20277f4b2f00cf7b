"""Renderers of a recommendation: serve command, --config YAML, LLM kwargs, JSON, and the checklist."""
from advisor.emit.checklist import render_checklist
from advisor.emit.configs import config_json, config_yaml, llm_kwargs, serve_command

__all__ = ["config_json", "config_yaml", "llm_kwargs", "render_checklist", "serve_command"]
