"""Start a command-line agent (Codex CLI, Claude Code, Gemini CLI) on the rollout's conversation.

Run by the `codex`, `claude_code` and `gemini_cli` harnesses as the ProgramHarness program:
reads the conversation (one JSON line on stdin), takes its last user message
as the prompt and its system prompt, and replaces itself (`os.execv`, the
same process and process group) with the CLI in non-interactive mode,
pointed at the interception server by the environment ProgramHarness set.
`ROLLKIT_CLI` is the executable, `ROLLKIT_CLI_ARGS` extra arguments (JSON).

It imports nothing but the standard library.
"""

import json
import os
import sys


def argv_for(kind, cli, prompt, system, model, extra):
    if kind == "codex":
        base = os.environ["OPENAI_BASE_URL"]
        provider = f'model_providers.rollkit={{name="rollkit", base_url="{base}", env_key="OPENAI_API_KEY", wire_api="responses"}}'
        text = f"{system}\n\n{prompt}" if system else prompt
        return [cli, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "-c", "model_provider=rollkit", "-c", provider, "-m", model, *extra, text]
    if kind == "claude":
        # Its own tools pre-approved rather than --dangerously-skip-permissions,
        # which Claude Code refuses to run as root (as CI does).
        argv = [cli, "-p", prompt, "--output-format", "json", "--permission-mode", "acceptEdits",
                "--allowedTools", "Bash,Read,Write,Edit,Glob,Grep,LS", "--model", model, *extra]
        if system:
            argv += ["--append-system-prompt", system]
        return argv
    if kind == "gemini":
        # The system prompt leads the prompt (GEMINI_SYSTEM_MD would replace
        # Gemini CLI's own, which tells it how to use its tools).
        text = f"{system}\n\n{prompt}" if system else prompt
        return [cli, "-p", text, "--approval-mode", "yolo", "--output-format", "json", "-m", model, *extra]
    raise SystemExit(f"unknown command-line agent {kind!r}")


def main():
    kind = sys.argv[1]
    messages = json.loads(sys.stdin.readline())["messages"]
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    cli = os.environ["ROLLKIT_CLI"]
    argv = argv_for(kind, cli, prompt, system, os.environ.get("ROLLKIT_MODEL", "rollkit"),
                    json.loads(os.environ.get("ROLLKIT_CLI_ARGS", "[]")))
    sys.stdout.flush()
    os.execv(cli, argv)


if __name__ == "__main__":
    main()
