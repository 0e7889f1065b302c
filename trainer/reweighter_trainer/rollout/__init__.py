"""Generation on a rollout server and the weights pushed back to it, on CPU (no NCCL).

- `gloo`: the wire both ends share (rendezvous, bucketed broadcast), stdlib + torch only.
- `client`: the trainer's side, TRL's `VLLMClient` with the gloo transport (trainer's venv).
- `vllm_plugin`: the server's side, a vLLM weight-transfer engine registered through the
  `vllm.general_plugins` entry point (rollout venv, set up by scripts/rollout-cpu.sh).
"""
