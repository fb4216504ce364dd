#!/usr/bin/env bash
# OpenAI Codex CLI (tests/agents/node, pinned), headless, two turns of one session against
# `deltaserve serve` on the bundled model: `codex exec`, then `codex exec resume --last`. It
# speaks the Responses API (POST /v1/responses, streamed, store false, prompt_cache_key and the
# session-id header carrying the session), configured by $CODEX_HOME/config.toml below.
#   tests/agents/codex.sh build/deltaserve      (ctest: agents/Codex.TwoTurns)
# See lib.sh for what every agent test shares and its knobs.
CLIENT="Codex"
source "$(dirname "$0")/lib.sh"
require_client codex
start_server
base_env
mkdir -p "$SCRATCH_HOME/.codex"
# A provider for the server (wire_api "responses": the only one Codex speaks), no retries (a
# refused request fails the turn at once), no analytics, no update check, and none of the
# features that reach GitHub (plugins and apps sync their catalogues from it). The Responses API
# has no way to cap output that Codex uses, so the reply ends where the model or the server
# ends it.
cat >"$SCRATCH_HOME/.codex/config.toml" <<TOML
model = "$MODEL"
model_provider = "deltaserve"
model_context_window = 131072
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.deltaserve]
name = "DeltaServe"
base_url = "$BASE_URL/v1"
wire_api = "responses"
env_key = "DELTASERVE_API_KEY"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 200000

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
TOML
CLIENT_ENV+=("CODEX_HOME=$SCRATCH_HOME/.codex" "DELTASERVE_API_KEY=sk-deltaserve-local")
args=(--skip-git-repo-check --json)
[[ $LEAN == 1 ]] && args+=(-c "base_instructions=\"$LEAN_SYSTEM\"")

# The JSONL events: a turn.completed, and no error event, turn.failed or error item (but the
# warning that Codex has no metadata of its own for a model it does not know).
check_turn() {
  python3 - "$WORK/turn$1.out" <<'PY' || fail "turn $1: Codex reports an error"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bad = [e for e in events if e.get("type") in ("error", "turn.failed")
       or (e.get("item", {}).get("type") == "error"
           and not e["item"].get("message", "").startswith("Model metadata for"))]
if bad or not any(e.get("type") == "turn.completed" for e in events):
    print("events:", json.dumps(bad or events)[:2000]); sys.exit(1)
PY
}

run_turn 1 "$NODE_BIN/codex" exec "${args[@]}" "$PROMPT1"
run_turn 2 "$NODE_BIN/codex" exec resume --last "${args[@]}" "$PROMPT2"
check_request_log
