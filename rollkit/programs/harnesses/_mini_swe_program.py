"""mini-swe-agent as an agent program, run by `rollkit.programs.harnesses.mini_swe_agent`.

A subprocess of the rollout's runtime, speaking only the ProgramHarness
contract: the conversation arrives as one JSON line on stdin, and its last
user message is mini-swe-agent's task. The package's own `DefaultAgent`, its
tool-calling configuration (`mini.yaml`, the `mini` command's) and its
`LocalEnvironment` run every bash action in the working folder (the
runtime's); its `LitellmModel` reaches the model as `openai/<ROLLKIT_MODEL>`
at `OPENAI_BASE_URL` with `OPENAI_API_KEY` (the interception server and the
rollout's secret). Cost tracking is off (no price list for a rollkit model)
and litellm's price map is read locally (it would be fetched). Prints the
exit status and submission as one JSON line.

It imports mini-swe-agent, never rollkit.
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
# One attempt: a refused call (the rollout stopped) must not be retried for minutes.
os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")

import yaml  # noqa: E402 - after the environment the imports read
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402


def main():
    messages = json.loads(sys.stdin.readline())["messages"]
    task = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    config = yaml.safe_load(get_config_path(os.environ.get("ROLLKIT_MINI_CONFIG", "mini")).read_text())
    agent_config = {k: v for k, v in config.get("agent", {}).items() if k != "mode"}
    agent_config["step_limit"] = int(os.environ.get("ROLLKIT_MINI_STEP_LIMIT", agent_config.get("step_limit") or 0))
    model_config = dict(config.get("model", {}))
    model_config["model_kwargs"] = {
        **model_config.get("model_kwargs", {}),
        "api_base": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"], "num_retries": 0,
    }
    model_config.update(model_name=f"openai/{os.environ.get('ROLLKIT_MODEL', 'rollkit')}", cost_tracking="ignore_errors")
    model = LitellmModel(**model_config)
    environment = LocalEnvironment(cwd=os.getcwd(), **config.get("environment", {}))
    result = DefaultAgent(model, environment, **agent_config).run(task)
    print(json.dumps({"exit_status": result.get("exit_status"), "submission": result.get("submission")}), flush=True)
    if result.get("exit_status") not in ("Submitted",):
        sys.exit(f"mini-swe-agent ended with {result.get('exit_status')}")


if __name__ == "__main__":
    main()
