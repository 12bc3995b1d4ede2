// Package server is tinyagent, a small pooled agent server: the server a
// team certifies from its own `go test` in this example module. It speaks
// the tenant-server protocol of tenantcanary's DESIGN.md (JSON-RPC 2.0, one
// object per line over stdio, one per websocket message at /api/ws) and
// keeps every profile's data in that profile's home:
//
//	$TINYAGENT_HOME (default $HOME/.tinyagent)   the launch profile
//	$TINYAGENT_HOME/profiles/<name>              a named profile
//	  config.yaml   model.{base_url, default, key_env}, terminal.cwd, custom_prompt
//	  .env          the profile's secrets: its provider key, under model.key_env
//	  SOUL.md       the system prompt
//	  state.db      its sessions (SQLite)
//	  cron/jobs.json
//
// A turn sends the conversation to the profile's own provider (OpenAI
// chat completions, the key from the profile's .env) and runs the
// provider's terminal tool calls in a subprocess under bubblewrap, in the
// profile's terminal.cwd, with the profile's .env as its environment. A
// cwd must lie in $TINYAGENT_WORK_ROOT/<profile> (default <launch
// home>/work; the launch profile's is "default"); TINYAGENT_SANDBOX=none
// runs tools without bubblewrap.
//
// Commands (Main reads os.Args):
//
//	tinyagent root                          print where named profiles live
//	tinyagent stdio                         serve one connection on stdin/stdout
//	tinyagent serve --host H --port P [--cron-interval D]
//	                                        serve every profile on one websocket server
//
// The serve backend takes its token from TINYAGENT_TOKEN, prints
// "backend listening on H:PORT" once bound, and fires due cron jobs every
// cron interval.
//
// TINYAGENT_LEAK=shared-key switches on a pooling bug, for the example's
// positive control: provider keys are cached process-wide by the name of
// the variable that holds them, and the cache is warmed from the launch
// profile at start-up, so every named profile's requests carry the launch
// profile's key.
package server
