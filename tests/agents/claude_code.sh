#!/usr/bin/env bash
# Claude Code (tests/agents/node, pinned), headless, two turns of one session against
# `deltaserve serve` on the bundled model: `claude -p ... --output-format json`, then
# `claude -p ... --continue`. It speaks the Anthropic Messages API (POST /v1/messages?beta=true,
# streamed, x-api-key, anthropic-version / anthropic-beta, X-Claude-Code-Session-Id).
#   tests/agents/claude_code.sh build/deltaserve      (ctest: agents/ClaudeCode.TwoTurns)
# See lib.sh for what every agent test shares and its knobs.
CLIENT="Claude Code"
source "$(dirname "$0")/lib.sh"
require_client claude
start_server
base_env
CLIENT_ENV+=(
  "ANTHROPIC_BASE_URL=$BASE_URL"
  "ANTHROPIC_API_KEY=sk-deltaserve-local"  # sent as x-api-key; the server here requires none
  # Every model slot the client may pick (main loop, small/fast, subagents) is the served model.
  "ANTHROPIC_MODEL=$MODEL" "ANTHROPIC_DEFAULT_OPUS_MODEL=$MODEL" "ANTHROPIC_DEFAULT_SONNET_MODEL=$MODEL"
  "ANTHROPIC_DEFAULT_HAIKU_MODEL=$MODEL" "CLAUDE_CODE_SUBAGENT_MODEL=$MODEL"
  # No telemetry, error reporting, update checks, feature-flag or other first-party fetches.
  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" "DISABLE_TELEMETRY=1" "DISABLE_ERROR_REPORTING=1"
  "DISABLE_AUTOUPDATER=1"
)
# Claude Code treats a reply cut by max_tokens as an error (after retrying it), so its output
# limit is its own (32,000) unless DS_AGENTS_MAX_OUTPUT_TOKENS says otherwise.
[[ -n ${DS_AGENTS_MAX_OUTPUT_TOKENS:-} ]] && CLIENT_ENV+=("CLAUDE_CODE_MAX_OUTPUT_TOKENS=$DS_AGENTS_MAX_OUTPUT_TOKENS")
args=(--output-format json --max-turns 4 --disallowedTools WebFetch,WebSearch)
[[ $LEAN == 1 ]] && args+=(--system-prompt "$LEAN_SYSTEM" --tools "")

# The result object: is_error false, no api_error_status, the session both turns share.
check_turn() {
  python3 - "$WORK/turn$1.out" "$WORK/session" <<'PY' || fail "turn $1: Claude Code reports an error"
import json, os, sys
text = open(sys.argv[1]).read().strip()
r = json.loads(text.splitlines()[-1]) if text else {}
if r.get("type") != "result" or r.get("is_error") or r.get("api_error_status"):
    print("result:", json.dumps({k: r.get(k) for k in ("subtype", "is_error", "api_error_status", "result", "terminal_reason")}))
    sys.exit(1)
sid = r.get("session_id")
if os.path.exists(sys.argv[2]) and open(sys.argv[2]).read() != sid:
    print("turn 2 ran in another session:", sid); sys.exit(1)
open(sys.argv[2], "w").write(sid or "")
PY
}

run_turn 1 "$NODE_BIN/claude" -p "$PROMPT1" "${args[@]}"
run_turn 2 "$NODE_BIN/claude" -p "$PROMPT2" --continue "${args[@]}"
check_request_log
