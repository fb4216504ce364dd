#!/usr/bin/env bash
# opencode (tests/agents/node, pinned), headless, two turns of one session against
# `deltaserve serve` on the bundled model: `opencode run`, then `opencode run --continue`. Its
# provider is @ai-sdk/openai-compatible (bundled in opencode), so it speaks chat completions
# (POST /v1/chat/completions, streamed, stream_options.include_usage, x-session-id header); the
# first invocation also asks the model for a session title.
#   tests/agents/opencode.sh build/deltaserve      (ctest: agents/Opencode.TwoTurns)
# See lib.sh for what every agent test shares and its knobs.
CLIENT="opencode"
source "$(dirname "$0")/lib.sh"
require_client opencode
# opencode's grep and glob tools use ripgrep from PATH and download it from GitHub when it is
# missing; scripts/setup installs Debian's.
command -v rg >/dev/null 2>&1 || skip "ripgrep (rg) is not installed (run scripts/setup)"
start_server
base_env
cfg=$SCRATCH_HOME/.config/opencode
mkdir -p "$cfg/node_modules"
# opencode installs @opencode-ai/plugin from the npm registry into its config folder unless
# that folder's package-lock.json already names it beside a node_modules folder: it does, so
# nothing is fetched.
echo '{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}' >"$cfg/package-lock.json"
out=${DS_AGENTS_MAX_OUTPUT_TOKENS:-512}
lean_agent=""
[[ $LEAN == 1 ]] && lean_agent=", \"agent\": {\"lean\": {\"mode\": \"primary\", \"prompt\": \"$LEAN_SYSTEM\", \"tools\": {\"*\": false}}}"
cat >"$cfg/opencode.json" <<JSON
{
  "model": "deltaserve/$MODEL",
  "small_model": "deltaserve/$MODEL",
  "enabled_providers": ["deltaserve"],
  "autoupdate": false,
  "share": "disabled",
  "permission": {"webfetch": "deny"},
  "provider": {
    "deltaserve": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "DeltaServe",
      "options": {"baseURL": "$BASE_URL/v1", "apiKey": "sk-deltaserve-local"},
      "models": {"$MODEL": {"name": "$MODEL", "limit": {"context": 131072, "output": $out}}}
    }
  }$lean_agent
}
JSON
CLIENT_ENV+=(
  "OPENCODE_DISABLE_AUTOUPDATE=1" "OPENCODE_DISABLE_MODELS_FETCH=1" "OPENCODE_DISABLE_LSP_DOWNLOAD=1"
  "OPENCODE_DISABLE_SHARE=1" "OPENCODE_DISABLE_DEFAULT_PLUGINS=1" "OPENCODE_DISABLE_CLAUDE_CODE=1"
  "OPENCODE_DISABLE_EXTERNAL_SKILLS=1"
)
args=(--format json)
[[ $LEAN == 1 ]] && args+=(--agent lean)

# The JSON events: a step_finish, and no error event.
check_turn() {
  refute "$1" '"type":"error"' "opencode reports an error"
  grep -q '"type":"step_finish"' "$WORK/turn$1.out" || fail "turn $1: opencode finished no step"
}

run_turn 1 "$NODE_BIN/opencode" run "${args[@]}" "$PROMPT1"
run_turn 2 "$NODE_BIN/opencode" run --continue "${args[@]}" "$PROMPT2"
check_request_log
