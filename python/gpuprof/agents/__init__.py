"""The assistant interface: answers about runs and traces for an AI assistant (``gpuprof mcp``) and
for scripts (``gpuprof findings PATH --json``).

An adapter over the same Report and advice every other output reads, like a renderer: it computes
nothing the report does not, and sizes what it says to a budget of tokens. ``answers`` holds the
answers (plain functions, no MCP); ``server`` wires them to the MCP Python SDK, which is an optional
dependency (``pip install 'torch-gpuprof[mcp]'``) imported only by ``gpuprof mcp``. docs/agents.md.
"""
