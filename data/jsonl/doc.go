// Package jsonl reads conversation datasets from JSON Lines files.
//
// Two line formats are read (Auto accepts either on each line):
//
//	messages: {"messages": [{"role": "user", "content": "..."}, ...]}
//	ShareGPT: {"conversations": [{"from": "human", "value": "..."}, ...]}
//
// Roles: system, user, assistant and tool (ShareGPT: system, human/user,
// gpt/assistant/chatgpt/model, tool). An assistant message may carry
// "reasoning_content". Content is a string, null (empty), or a list of
// {"type": "text", "text": ...} parts, which are joined. Anything else
// (other roles, tool_calls, image parts, a line that is not a JSON object)
// makes the line bad: a *LineError that names the file, the line and the
// reason. Text that is not UTF-8 (bytes, or \u escapes of unpaired
// surrogates) makes the line bad too: it is never silently replaced with
// U+FFFD. Blank lines are skipped.
//
// Files are streamed (a file may be larger than memory) and may be gzip or
// zstd compressed (recognised by their first bytes, whatever their name).
package jsonl
