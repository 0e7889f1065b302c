"""README's `cpu` profile row and transcript say what docker-compose.yml runs: the trainer's
config, its policy, its generation on the vllm-cpu rollout server and its number of steps (the
row once said "tiny local model, 3 steps" where compose runs SmolLM2 on vllm-cpu for 2)."""

from __future__ import annotations

import re

import yaml
from deploy_support import COMPOSE_FILE, REPO


def test_the_readme_says_what_the_cpu_profile_runs() -> None:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    command = services["trainer-cpu"]["command"]
    config_path = command[command.index("--config") + 1]
    config = yaml.safe_load((REPO / config_path).read_text())
    steps = config["max_steps"]
    assert "smollm2" in config["model"] and config["use_vllm"] is True
    assert any(a.startswith("vllm_server_base_url=http://rollout-cpu:") for a in command)
    assert services["rollout-cpu"]["build"]["dockerfile"] == "services/rollout/Dockerfile.cpu"

    readme = (REPO / "README.md").read_text()
    (row,) = [r for r in readme.splitlines() if r.startswith("| `docker compose --profile cpu up")]
    assert f"{steps} steps" in row and f"`{config_path}`" in row, row
    assert "SmolLM2-135M" in row and "vllm-cpu" in row and "tiny" not in row, row
    (line,) = re.findall(r"reweighter-train summary: (\{.*\})", readme)
    method = config["reweighter"]["method"]
    assert f'"steps": {steps},' in line and f'"method": "{method}"' in line, line
