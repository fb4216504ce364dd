#!/usr/bin/env bash
# Qwen Code (tests/agents/node, pinned), headless, two turns of one session against
# `deltaserve serve` on the bundled model: `qwen PROMPT`, then `qwen PROMPT --continue`. Its
# "openai" auth speaks chat completions (POST /v1/chat/completions, streamed,
# stream_options.include_usage), configured by OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL
# and ~/.qwen/settings.json below.
#   tests/agents/qwen_code.sh build/deltaserve      (ctest: agents/QwenCode.TwoTurns)
# See lib.sh for what every agent test shares and its knobs.
CLIENT="Qwen Code"
source "$(dirname "$0")/lib.sh"
require_client qwen
start_server
base_env
mkdir -p "$SCRATCH_HOME/.qwen"
# OpenAI-compatible auth chosen up front (no login prompt), no usage statistics or telemetry, no
# update check; ripgrep from PATH (the package's own copy is not executable as npm installs it).
cat >"$SCRATCH_HOME/.qwen/settings.json" <<JSON
{
  "security": {"auth": {"selectedType": "openai"}},
  "model": {"name": "$MODEL"},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "tools": {"useBuiltinRipgrep": false}
}
JSON
CLIENT_ENV+=(
  "OPENAI_BASE_URL=$BASE_URL/v1" "OPENAI_API_KEY=sk-deltaserve-local" "OPENAI_MODEL=$MODEL"
  "QWEN_TELEMETRY_ENABLED=false" "QWEN_USAGE_STATISTICS_ENABLED=false"
  "QWEN_CODE_MAX_OUTPUT_TOKENS=${DS_AGENTS_MAX_OUTPUT_TOKENS:-512}"
)
args=(--output-format json --max-session-turns 4 --exclude-tools web_fetch,web_search)
# Lean: a one-line system prompt and no tools (all but read_file excluded, the rest by --bare).
[[ $LEAN == 1 ]] && args=(--output-format json --max-session-turns 4 --bare --system-prompt "$LEAN_SYSTEM"
  --exclude-tools agent,get_goal,list_agents,skill,tool_call,tool_search,update_goal,edit,notebook_edit,run_shell_command,web_fetch,web_search)

# The JSON array of messages: its result is not an error.
check_turn() {
  python3 - "$WORK/turn$1.out" <<'PY' || fail "turn $1: Qwen Code reports an error"
import json, sys
msgs = json.loads(open(sys.argv[1]).read())
r = [m for m in msgs if m.get("type") == "result"]
if not r or r[-1].get("is_error") or r[-1].get("subtype") != "success":
    print("result:", json.dumps(r[-1] if r else None)[:2000]); sys.exit(1)
PY
  refute "$1" 'API Error' "Qwen Code reports an API error"
}

run_turn 1 "$NODE_BIN/qwen" "$PROMPT1" "${args[@]}"
run_turn 2 "$NODE_BIN/qwen" "$PROMPT2" --continue "${args[@]}"
check_request_log
