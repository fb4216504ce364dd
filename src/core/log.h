// Where log lines go. spdlog's default logger writes to stdout, which is where a command's
// output goes (generate's text and --json, tokenizer encode's ids, a table); a log line there
// breaks every script that reads it. Each program calls this once, first thing in main.
#pragma once

namespace ds {

// Replaces spdlog's default logger with one that writes to stderr (coloured on a terminal, as
// before), keeping its empty name and so the same "[time] [level] text" lines.
void log_to_stderr();

}  // namespace ds
